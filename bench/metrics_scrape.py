"""What one /metrics scrape costs the broker at many partitions.

    .venv/bin/python bench/metrics_scrape.py [--partitions N ...] [--scrapes S] [--pairs P] [--before SRC] [--smoke]

A broker with --http-listener, one topic of N partitions (one record in each), a group with
an offset committed on every partition and an idle group with one; then S scrapes, one after
another. Printed: the broker process's CPU per scrape (user + system, from /proc: steadier than
wall time on a shared machine) and per partition, the scrape's wall time and size, and the load
average, as a table. With --before (another tree's src/, e.g. a checkout of an older commit) that
tree's broker and this one's are measured in turn, P pairs. No peer runs beside it: Apache Kafka
serves no /metrics of its own (its JMX needs Prometheus' exporter agent, not resolved here).
"""
from __future__ import annotations

import argparse
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from rich.console import Console

from headwater.testing import BrokerProcess, bench_arguments, cpu_seconds

from tables import table  # bench/tables.py

PER_REQUEST = 1_000   # max.partitions.per.request


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    for first in range(0, len(offsets), PER_REQUEST):   # one commit record stays under message.max.bytes
        consumer.commit(offsets=offsets[first:first + PER_REQUEST], asynchronous=False)
    consumer.close()


def measure(partitions: int, scrapes: int, source: Path | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "data", "--http-listener", "127.0.0.1:0", source=source) as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic("other", 1)])["other"].result(60)
        admin.create_topics([NewTopic("wide", min(partitions, PER_REQUEST))])["wide"].result(60)
        for total in range(2 * PER_REQUEST, partitions + 1, PER_REQUEST):
            admin.create_partitions([NewPartitions("wide", total)])["wide"].result(60)
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
        for partition in range(partitions):
            producer.produce("wide", b"x", partition=partition)
        producer.flush(60)
        commit(broker.bootstrap, "readers", [TopicPartition("wide", p, 1) for p in range(partitions)])
        commit(broker.bootstrap, "idle", [TopicPartition("other", 0, 0)])
        url = broker.console_url + "metrics"
        urllib.request.urlopen(url, timeout=120).read()   # a first scrape, not counted
        cpu, wall = cpu_seconds(broker.proc.pid), time.perf_counter()
        for _ in range(scrapes):
            size = len(urllib.request.urlopen(url, timeout=120).read())
        cpu, wall = cpu_seconds(broker.proc.pid) - cpu, time.perf_counter() - wall
        return {"broker": "before" if source else "this tree", "partitions": f"{partitions:,}",
                "CPU ms/scrape": f"{cpu / scrapes * 1e3:.1f}", "CPU µs/partition": f"{cpu / scrapes / partitions * 1e6:.1f}",
                "wall ms/scrape": f"{wall / scrapes * 1e3:.1f}", "bytes": f"{size:,}",
                "load": Path("/proc/loadavg").read_text().split()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1_000, 9_000],
                        help="topic sizes (a broker holds 10,000 partitions, __consumer_offsets' included)")
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--before", type=Path, help="another tree's src/, measured in turn with this one")
    args = bench_arguments(parser, smoke={"partitions": [10], "scrapes": 2})
    rows = []
    for partitions in args.partitions:
        for _ in range(args.pairs):
            for source in ([args.before] if args.before else []) + [None]:
                rows.append(measure(partitions, args.scrapes, source))
                Console(stderr=True).print(rows[-1])   # a long run cut short still leaves its rows
    Console().print(table("/metrics: the broker's CPU per scrape", rows))


if __name__ == "__main__":
    main()
