"""What one /metrics scrape costs the broker at many partitions.

    .venv/bin/python bench/metrics_scrape.py [--partitions N] [--scrapes S] [--pairs P] [--before SRC]

A broker with --http-listener, one topic of N partitions (one record in each), a group with
an offset committed on every partition and an idle group with one; then S scrapes, one after
another. Printed: the broker process's CPU per scrape (user + system, from /proc: steadier than
wall time on a shared machine), the scrape's wall time and size, and the load average. With
--before (another tree's src/, e.g. /work/main/src) that tree's broker and this one's are
measured in turn, P pairs.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
import urllib.request
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from headwater.testing import BrokerProcess

PER_REQUEST = 1_000   # max.partitions.per.request


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commit(bootstrap: str, group: str, offsets: list[TopicPartition]) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    for first in range(0, len(offsets), PER_REQUEST):   # one commit record stays under message.max.bytes
        consumer.commit(offsets=offsets[first:first + PER_REQUEST], asynchronous=False)
    consumer.close()


def measure(partitions: int, scrapes: int, source: Path | None) -> str:
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
        cpu, wall = cpu_s(broker.proc.pid), time.perf_counter()
        for _ in range(scrapes):
            size = len(urllib.request.urlopen(url, timeout=120).read())
        cpu, wall = cpu_s(broker.proc.pid) - cpu, time.perf_counter() - wall
        load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
        return (f"broker CPU {cpu / scrapes * 1e3:.0f} ms/scrape, wall {wall / scrapes * 1e3:.0f} ms/scrape, "
                f"{size:,} bytes; load {load}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=1_000)
    parser.add_argument("--scrapes", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=1)
    parser.add_argument("--before", type=Path, help="another tree's src/, measured in turn with this one")
    args = parser.parse_args()
    for _ in range(args.pairs):
        if args.before is not None:
            print(f"before {args.partitions} partitions: {measure(args.partitions, args.scrapes, args.before)}", flush=True)
        print(f"this   {args.partitions} partitions: {measure(args.partitions, args.scrapes, None)}", flush=True)


if __name__ == "__main__":
    main()
