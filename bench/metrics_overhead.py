"""What the HTTP listener (Prometheus /metrics and the web console) costs the produce path.

    .venv/bin/python bench/metrics_overhead.py [--messages N] [--requests N] [--rounds R] [--smoke]

Two brokers in the same run, the same flags but one with --http-listener (its /metrics
scraped every second meanwhile, a busier scraper than Prometheus' default), each fed in
turn, round after round (which goes first alternates), by one confluent-kafka producer (100-byte values, acks=1):
batched (linger.ms=5: the counters are updated per batch and request, so per record they
cost next to nothing) and one request per record (flush after each: the per-request
counters and latency histogram at their worst). Two figures, each the median over the
rounds: records/s, and the broker process's CPU time per record (user + system, from
/proc), which other load on a shared machine disturbs far less than wall-clock rates.
The peer is the broker without the listener; the issue's budget is 5%. Since the counters
became the core's own (broker/stats.py), both brokers keep them: what differs is the
listener and the scrapes.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import urllib.request

from confluent_kafka import Producer
from rich.console import Console
from tables import table
from throughput import produce_throughput

from headwater.testing import BrokerProcess, bench_arguments, bench_workdir

VALUE = b"x" * 100


def one_request_per_record(bootstrap: str, topic: str, n: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 0, "enable.idempotence": False})
    producer.produce(topic, VALUE)
    producer.flush(30)
    start = time.perf_counter()
    for _ in range(n):
        producer.produce(topic, VALUE)
        producer.flush(30)
    return time.perf_counter() - start


def scrape_every_second(url: str, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        with urllib.request.urlopen(url + "metrics", timeout=10) as response:
            response.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000, help="records per batched round")
    parser.add_argument("--requests", type=int, default=10_000, help="records per one-request-per-record round")
    parser.add_argument("--rounds", type=int, default=5)
    args = bench_arguments(parser, {"messages": 2000, "requests": 100, "rounds": 1})

    workdir = bench_workdir("headwater-bench-metrics-")
    workloads = {"batched": (args.messages, produce_throughput),
                 "one request per record": (args.requests, one_request_per_record)}
    rates: dict[tuple[str, str], list[float]] = {}
    cpu: dict[tuple[str, str], list[float]] = {}
    stop = threading.Event()
    with BrokerProcess(workdir / "off", "--flush", "never") as off, \
            BrokerProcess(workdir / "on", "--flush", "never", "--http-listener", "127.0.0.1:0") as on:
        scraper = threading.Thread(target=scrape_every_second, args=(on.console_url, stop), daemon=True)
        scraper.start()
        for round_ in range(args.rounds):
            for workload, (records, run) in workloads.items():
                pair = (("off", off), ("on", on))
                for name, broker in pair if round_ % 2 == 0 else pair[::-1]:  # neither always goes first
                    used = broker.cpu_seconds()
                    seconds = run(broker.bootstrap, f"bench-{round_}", records)
                    rates.setdefault((workload, name), []).append(records / seconds)
                    cpu.setdefault((workload, name), []).append((broker.cpu_seconds() - used) / records * 1e6)
        stop.set()
        scraper.join()
    rows = []
    for workload in workloads:
        row = {"workload": workload}
        for figure, series, unit in (("records/s", rates, ",.0f"), ("broker CPU us/record", cpu, ".2f")):
            without, with_ = (statistics.median(series[(workload, name)]) for name in ("off", "on"))
            row |= {f"{figure} off": format(without, unit), f"{figure} on": format(with_, unit),
                    f"{figure} change": f"{(with_ - without) / without * 100:+.1f}%"}
        rows.append(row)
    Console(width=150).print(table(f"Produce with and without the HTTP listener, median of {args.rounds} round(s)", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
