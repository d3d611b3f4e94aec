"""Transactional produce throughput next to plain idempotent produce, Headwater next to
librdkafka's in-process mock broker (C), which speaks the transaction APIs too.

    .venv/bin/python bench/transactions.py [--seconds S] [--rounds N] [--smoke]

One confluent-kafka producer, 100-byte values, acks=all, 3 partitions: idempotent only;
then transactional, committing every 100 ms and every 1,000 ms (Kafka Streams' and
quixstreams' default commit intervals sit in this range). The modes take turns, --rounds
times, --seconds each; figures are the median acknowledged messages per second, the cost
of transactions against the idempotent runs of the same broker, and the spread of the
rounds (max - min over the median: on a shared machine, read small differences as noise).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from rich.console import Console

from headwater.testing import BrokerProcess, MockKafkaCluster, bench_arguments, produce_all

from tables import table  # bench/tables.py

VALUE = b"x" * 100
PARTITIONS = 3
console = Console(stderr=True)


def run_mode(bootstrap: str, topic: str, seconds: float, commit_ms: int | None) -> tuple[float, int]:
    """(messages acknowledged per second, transactions committed) over ``seconds`` of producing,
    the clock started once the topic exists and the producer has its id."""
    config = {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True,
              "queue.buffering.max.messages": 1_000_000}
    if commit_ms is not None:
        config["transactional.id"] = f"bench-{topic}"
    producer = Producer(config)
    acked = 0

    def delivered(err, msg):
        nonlocal acked
        if err is None:
            acked += 1

    def produce_until(deadline: float) -> None:
        produce_all(producer, topic, itertools.takewhile(lambda _: time.perf_counter() < deadline,
                                                         itertools.repeat(VALUE)),
                    partitions=itertools.cycle(range(PARTITIONS)), on_delivery=delivered)

    transactions = 0
    if commit_ms is not None:
        producer.init_transactions(30)
        producer.begin_transaction()
    for partition in range(PARTITIONS):  # warm: topic created, connections and producer id in place
        producer.produce(topic, VALUE, partition=partition)
    if commit_ms is not None:
        producer.commit_transaction(60)
    producer.flush(60)
    acked = 0
    start = time.perf_counter()
    end = start + seconds
    if commit_ms is None:
        produce_until(end)
        producer.flush(60)
    while commit_ms is not None and time.perf_counter() < end:
        producer.begin_transaction()
        produce_until(min(end, time.perf_counter() + commit_ms / 1000))
        producer.commit_transaction(60)   # flushes, then EndTxn: every message is acknowledged and committed
        transactions += 1
    return acked / (time.perf_counter() - start), transactions


MODES = (("idempotent", None), ("txn 100 ms", 100), ("txn 1000 ms", 1000))  # txn N ms: a commit every N ms


def measure(name: str, bootstrap: str, seconds: float, rounds: int) -> list[dict]:
    """The modes run in turn, ``rounds`` times (the machine's load drifts): the median of each."""
    rates: dict[str, list[float]] = {label: [] for label, _ in MODES}
    transactions: dict[str, int] = dict.fromkeys(rates, 0)
    for round_ in range(rounds):
        for label, commit_ms in MODES:
            console.print(f"[bold]{name}[/]: {label} for {seconds} s (round {round_ + 1}/{rounds})")
            rate, committed = run_mode(bootstrap, f"bench-{commit_ms or 'idempotent'}", seconds, commit_ms)
            rates[label].append(rate)
            transactions[label] += committed
    baseline = statistics.median(rates["idempotent"])
    rows = []
    for label, samples in rates.items():
        rate = statistics.median(samples)
        rows.append({"broker": name, "mode": label, "msg/s": f"{rate:,.0f}", "MB/s": f"{rate * len(VALUE) / 1e6:,.1f}",
                     "commits": f"{transactions[label]:,}", "vs idempotent": f"{(rate / baseline - 1) * 100:+.1f}%",
                     "spread": f"{(max(samples) - min(samples)) / rate * 100:.0f}%"})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0, help="seconds of producing per mode and round")
    parser.add_argument("--rounds", type=int, default=5, help="times each mode runs (the median is reported)")
    args = bench_arguments(parser, {"seconds": 0.5, "rounds": 1})
    with tempfile.TemporaryDirectory(prefix="headwater-bench-") as workdir:
        with BrokerProcess(Path(workdir) / "data", "--flush", "never", "--num-partitions", str(PARTITIONS)) as broker:
            rows = measure("Headwater", broker.bootstrap, args.seconds, args.rounds)
    mock = MockKafkaCluster(brokers=1)  # lives while `mock` does; clients reach it over loopback
    mock_bootstrap = mock.bootstrap
    rows += measure("librdkafka mock (C)", mock_bootstrap, args.seconds, args.rounds)
    Console().print(table(f"Transactional vs idempotent produce: 100-byte values, acks=all, {PARTITIONS} partitions",
                          rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
