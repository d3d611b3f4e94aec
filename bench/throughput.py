"""Broker throughput and latency: Headwater next to Apache Kafka (one node) and librdkafka's mock broker.

    .venv/bin/python bench/throughput.py [--messages N] [--rate R] [--seconds S]
                                         [--durable-seconds S] [--before REV] [--smoke]

One confluent-kafka producer (100-byte values, acks=all) and one consumer, per broker:
produce and consume messages/s and MB/s; the same with kcat, whose C loop shows what the
broker takes when the client's Python is out of the way; then end-to-end latency p50/p99
at a fixed rate. The last column is Headwater / Kafka.

The peers, all in the same run on the same machine: Apache Kafka 4.4, one KRaft node
(``headwater.testing.KafkaCluster(1, jvm_options=KAFKA_PRODUCTION_OPTIONS)``: the JVM options
kafka-server-start.sh gives a node, Kafka's default configs but for loopback listeners,
3 partitions per new topic and small internal topics), and librdkafka's mock cluster, a
Kafka-protocol broker in C that keeps only a bounded tail of each partition in memory (so it
is read back for as many messages as it still holds: "messages consumed").

Fsync policy. Kafka by default never fsyncs on the produce path: log.flush.interval.messages
is Long.MAX_VALUE, so it acknowledges once the batch is in the OS page cache (its durability
is replication). Headwater's default (``--flush always``) fsyncs before acknowledging an
acks=all produce. The first table runs Headwater with ``--flush never``, Kafka's policy.

Durable produce (a second table): 3 idempotent producers, acks=all, against the broker with
``--flush always``: acknowledged msg/s and the p50/p99 of produce → delivery report, for this
tree (group commit: one fsync per round of requests) and for the broker before group commit
(git revision REV, default the parent of the commit that brought it, run from a ``git
archive`` of its src/; one fsync per request), next to Kafka on its defaults (no fsync) and
the mock broker (no disk at all).
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from rich.console import Console
from rich.table import Table

from headwater.testing import (KAFKA_PRODUCTION_OPTIONS, BrokerProcess, KafkaCluster, MockKafkaCluster, bench_arguments,
                               bench_workdir, produce_all)

VALUE = b"x" * 100
GROUP_COMMIT_SUBJECT = "Group commit for flush=always"  # the commit the "before" broker precedes
# Durable produce runs saturated: each producer keeps this many messages queued, so its latency is
# mostly that queue drained at the acked rate (the same depth on every broker).
QUEUED = 10_000
console = Console(stderr=True)


def produce_throughput(bootstrap: str, topic: str, n: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1_000_000,
                         "queue.buffering.max.messages": 1_000_000, "enable.idempotence": False})
    producer.produce(topic, VALUE)
    producer.flush(30)  # metadata and connection are warm before the clock starts

    def values():
        for i in range(n):
            if i % 100_000 == 0:
                console.print(f"  produced {i:,}/{n:,}", end="\r")
            yield VALUE

    start = time.perf_counter()
    produce_all(producer, topic, values())
    producer.flush(120)
    return time.perf_counter() - start


def assign_all(consumer: Consumer, topic: str) -> None:
    """Every partition from the start (the mock broker auto-creates topics with several)."""
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])


def consume_throughput(bootstrap: str, topic: str) -> tuple[int, float]:
    """(messages read from the beginning, seconds until the last of them arrived)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False,
                         "fetch.max.bytes": 50 * 1024 * 1024, "max.partition.fetch.bytes": 10 * 1024 * 1024,
                         "queued.min.messages": 1_000_000})
    assign_all(consumer, topic)
    got, start = 0, time.perf_counter()
    last = start
    while batch := consumer.consume(10_000, 2.0):
        got += len(batch)
        last = time.perf_counter()
    consumer.close()
    return got, last - start


def kcat_throughput(bootstrap: str, topic: str, n: int, workdir: Path) -> tuple[float, float]:
    """(produce s, consume s) for n messages with kcat: librdkafka with no Python in the loop."""
    lines = workdir / "values.txt"
    if not lines.exists():
        lines.write_bytes((VALUE[:-1] + b"\n") * n)  # 99 bytes + newline: 100-byte values
    start = time.perf_counter()
    with open(lines, "rb") as f:
        subprocess.run(["kcat", "-b", bootstrap, "-P", "-t", topic, "-X", "linger.ms=5", "-X", "acks=all"],
                       stdin=f, check=True)
    produced = time.perf_counter() - start
    start = time.perf_counter()
    subprocess.run(["kcat", "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-c", str(n),
                    "-f", "%o\n", "-X", "fetch.max.bytes=52428800"], check=True, stdout=subprocess.DEVNULL)
    return produced, time.perf_counter() - start


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> list[float]:
    """Produce at `rate` msg/s with the send time inside; the consumer measures arrival - send."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "fetch.wait.max.ms": 100,
                         "fetch.min.bytes": 1})
    # linger.ms=1: what a latency-minded user sets; 0 makes librdkafka send one request per message.
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    producer.produce(topic, repr(time.perf_counter()).encode())  # creates the topic
    producer.flush(10)
    assign_all(consumer, topic)
    consumer.consume(1, 2.0)
    total = int(rate * seconds)
    samples: list[float] = []
    done = threading.Event()

    def receive():  # poll, not consume(n): consume waits until n messages have gathered
        while len(samples) < total and not done.is_set():
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                samples.append(time.perf_counter() - float(msg.value()))

    receiver = threading.Thread(target=receive)
    receiver.start()
    start = time.perf_counter()
    for i in range(total):
        target = start + i / rate
        while (now := time.perf_counter()) < target:
            time.sleep(min(target - now, 0.001))
        producer.produce(topic, repr(time.perf_counter()).encode())
        producer.poll(0)
    producer.flush(30)
    receiver.join(30)
    done.set()
    consumer.close()
    return samples


def durable_produce(bootstrap: str, topic: str, seconds: float, producers: int = 3) -> dict:
    """``producers`` idempotent acks=all producers, each on its own thread, for ``seconds``."""
    latencies: list[float] = []   # produce() → delivery report, acknowledged messages only

    def delivered(err, msg):
        if err is None:
            latencies.append(msg.latency())

    def run(producer: Producer, deadline: float) -> None:
        produce_all(producer, topic, itertools.takewhile(lambda _: time.perf_counter() < deadline,
                                                         itertools.repeat(VALUE)), on_delivery=delivered)
        producer.flush(60)

    clients = [Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                         "linger.ms": 5, "queue.buffering.max.messages": QUEUED}) for _ in range(producers)]
    for client in clients:   # each has its producer id and the topic's metadata before the clock starts
        client.produce(topic, VALUE)
        client.flush(30)
    latencies.clear()
    start = time.perf_counter()
    threads = [threading.Thread(target=run, args=(client, start + seconds)) for client in clients]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    latencies.sort()
    return {"acked msg/s": len(latencies) / elapsed, "p50 ms": statistics.median(latencies) * 1000,
            "p99 ms": latencies[int(len(latencies) * 0.99) - 1] * 1000, "acked": len(latencies)}


def source_before_group_commit(revision: str | None, workdir: Path) -> Path | None:
    """The src/ of ``revision`` (default: the broker before group commit), extracted from git; None without git."""
    repo = Path(__file__).resolve().parent.parent
    try:
        if revision is None:
            commit = subprocess.run(["git", "log", "-1", "--format=%H", "--grep", GROUP_COMMIT_SUBJECT],
                                    cwd=repo, capture_output=True, text=True, check=True).stdout.strip()
            if not commit:
                return None
            revision = commit + "^"
        tree = workdir / "before"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", revision, "src"], cwd=repo, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        return tree / "src"
    except (OSError, subprocess.CalledProcessError) as exc:
        console.print(f"[yellow]no 'before' broker: {exc}[/]")
        return None


def durable_table(args, workdir: Path, kafka_bootstrap: str, mock_bootstrap: str) -> Table:
    rows = {}
    before = source_before_group_commit(args.before, workdir)
    for name, source in (("Headwater, group commit", None), ("Headwater before (fsync per request)", before)):
        if name.endswith("request)") and source is None:
            continue
        console.print(f"[bold]{name}[/]: 3 idempotent acks=all producers, --flush always, {args.durable_seconds}s")
        with BrokerProcess(workdir / f"durable-{len(rows)}", "--flush", "always", "--num-partitions", "3",
                           source=source) as broker:
            rows[name] = durable_produce(broker.bootstrap, "durable", args.durable_seconds)
    console.print("[bold]Apache Kafka[/]: the same, on its defaults (no fsync)")
    rows["Apache Kafka, 1 node, default (OS flushes)"] = durable_produce(kafka_bootstrap, "durable", args.durable_seconds)
    console.print("[bold]librdkafka mock[/]: the same (no fsync at all)")
    rows["librdkafka mock broker (C), no fsync"] = durable_produce(mock_bootstrap, "durable", args.durable_seconds)
    table = Table(title="Durable produce: 3 idempotent producers, acks=all, 100-byte values, --flush always")
    table.add_column("broker")
    for metric in next(iter(rows.values())):
        table.add_column(metric, justify="right")
    for name, row in rows.items():
        table.add_row(name, *(f"{value:,.1f}" for value in row.values()))
    return table


def measure(name: str, bootstrap: str, args, workdir: Path) -> dict:
    console.print(f"[bold]{name}[/]: producing {args.messages:,} messages")
    t_produce = produce_throughput(bootstrap, "bench", args.messages)
    console.print(f"[bold]{name}[/]: consuming them back")
    consumed, t_consume = consume_throughput(bootstrap, "bench")
    console.print(f"[bold]{name}[/]: the same with kcat (C)")
    k_produce, k_consume = kcat_throughput(bootstrap, "bench-kcat", args.messages, workdir)
    console.print(f"[bold]{name}[/]: latency at {args.rate:,} msg/s for {args.seconds}s")
    samples = sorted(latency(bootstrap, "latency", args.rate, args.seconds))
    mb = args.messages * len(VALUE) / 1e6
    return {"produce msg/s": args.messages / t_produce, "produce MB/s": mb / t_produce,
            "consume msg/s": consumed / t_consume, "consume MB/s": consumed * len(VALUE) / 1e6 / t_consume,
            "messages consumed": consumed,
            "kcat produce msg/s": args.messages / k_produce, "kcat consume msg/s": args.messages / k_consume,
            "e2e p50 ms": statistics.median(samples) * 1000,
            "e2e p99 ms": samples[int(len(samples) * 0.99) - 1] * 1000,
            "latency samples": len(samples)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2_000_000)
    parser.add_argument("--rate", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--durable-seconds", type=float, default=10.0)
    parser.add_argument("--before", metavar="REV", help="git revision of the broker to compare durable produce "
                        "with (default: the one before group commit)")
    args = bench_arguments(parser, {"messages": 2000, "rate": 200, "seconds": 1, "durable_seconds": 1})

    results = {}
    workdir = bench_workdir("headwater-bench-")
    with BrokerProcess(workdir / "data", "--flush", "never") as broker:
        results["Headwater"] = measure("Headwater", broker.bootstrap, args, workdir)
    mock = MockKafkaCluster(brokers=1)  # lives while `mock` does; clients reach it over loopback
    mock_bootstrap = mock.bootstrap
    with KafkaCluster(nodes=1, jvm_options=KAFKA_PRODUCTION_OPTIONS) as kafka:
        results["Apache Kafka 4.4, 1 node"] = measure("Apache Kafka", kafka.bootstrap, args, workdir)
        results["librdkafka mock broker (C)"] = measure("librdkafka mock", mock_bootstrap, args, workdir)
        durable = durable_table(args, workdir, kafka.bootstrap, mock_bootstrap)

    table = Table(title=f"Broker throughput: {args.messages:,} x 100-byte messages, acks=all, no fsync on any")
    table.add_column("metric")
    for name in results:
        table.add_column(name, justify="right")
    table.add_column("Headwater / Kafka", justify="right")
    for metric in results["Headwater"]:
        ratio = results["Headwater"][metric] / results["Apache Kafka 4.4, 1 node"][metric]
        table.add_row(metric, *(f"{r[metric]:,.1f}" for r in results.values()), f"{ratio:.2f}")
    Console().print(table)
    Console().print(durable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
