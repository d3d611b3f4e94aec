"""Where each microsecond per row goes in the Spark source's partition reader, outside Spark.

    .venv/bin/python bench/spark_reader.py [--rows 1000000] [--range 50000] [--smoke]

One partition of `--rows` records of 100 bytes on a broker; each stage runs three times
and the fastest counts. CPU is this process's (a client library's threads included) per
row; the broker's CPU per row serving it beside. Its peer is a client library alone:
confluent-kafka's `consume(10,000)` with nothing done to the messages (the reader's own
client before it fetched record batches itself).
"""

from __future__ import annotations

import argparse
import time

from confluent_kafka import TopicPartition
from spark_source import fill

from headwater.spark.cluster import consumer
from headwater.spark.fetcher import Fetcher
from headwater.spark.partition_reader import OffsetRange, read_range
from headwater.spark.record_columns import FetchedRecords
from headwater.testing import BrokerProcess, bench_arguments, bench_workdir, cpu_seconds


def fastest(stage, rows: int, broker_pid: int) -> tuple[float, float, float]:
    """(wall, CPU, broker CPU) microseconds per row of the fastest of three runs."""
    runs = []
    for _ in range(3):
        wall, cpu, broker = time.perf_counter(), time.process_time(), cpu_seconds(broker_pid)
        stage()
        runs.append((time.perf_counter() - wall, time.process_time() - cpu, cpu_seconds(broker_pid) - broker))
    return tuple(x / rows * 1e6 for x in min(runs))


def consume_all(client: dict, rows: int) -> None:
    """Every record of the partition, in consume(10,000) calls, the messages dropped at once;
    prefetch and waits set for a bounded read as the reader once set them."""
    kafka = consumer({**client, "fetch.queue.backoff.ms": 1, "queued.min.messages": 10_000, "fetch.wait.max.ms": 10})
    kafka.assign([TopicPartition("bench", 0, 0)])
    n = 0
    while n < rows:
        n += len(kafka.consume(min(10_000, rows - n), timeout=1))
    kafka.close()


def fetch_all(client: dict, rows: int, columns: bool) -> None:
    """Every record of the partition in fetch requests; with `columns`, each response
    walked into an Arrow batch."""
    fetcher = Fetcher(client)
    position = 0
    while position < rows:
        fetched = fetcher.fetch("bench", 0, position)
        records = FetchedRecords(fetched.records, False)
        if columns:
            records.columns("bench", 0, position, rows)
        position = records.next_offset
    fetcher.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--range", type=int, default=50_000, help="rows a Spark task reads (one offset range)")
    args = bench_arguments(parser, {"rows": 20_000, "range": 5_000})

    with BrokerProcess(bench_workdir("hw-reader-bench-") / "data", "--flush", "never") as broker:
        fill(broker.bootstrap, "bench", args.rows, partitions=1)
        client = {"bootstrap.servers": broker.bootstrap}
        pid = broker.proc.pid

        def reader():
            ranges = [OffsetRange("bench", 0, s, min(args.rows, s + args.range)) for s in range(0, args.rows, args.range)]
            assert sum(b.num_rows for r in ranges for b in read_range(client, r, False, True)) == args.rows

        figures = {
            "consume(10,000) (the peer)": fastest(lambda: consume_all(client, args.rows), args.rows, pid),
            "fetch requests, batches walked": fastest(lambda: fetch_all(client, args.rows, False), args.rows, pid),
            "... and Arrow columns built": fastest(lambda: fetch_all(client, args.rows, True), args.rows, pid),
            f"whole reader, ranges of {args.range:,}": fastest(reader, args.rows, pid),
        }

    print(f"{'stage, ' + format(args.rows, ',') + ' rows of 100 B':<44}{'us/row CPU':>12}{'wall':>8}"
          f"{'rows/s':>12}{'broker CPU':>12}")
    for name, (wall, cpu, broker) in figures.items():
        print(f"{name:<44}{cpu:>12.3f}{wall:>8.3f}{1e6 / wall:>12,.0f}{broker:>12.3f}")


if __name__ == "__main__":
    main()
