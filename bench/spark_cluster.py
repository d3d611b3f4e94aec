"""The windowed pipeline on Spark: local mode next to a standalone cluster with one and two
workers, same input, same run.

    .venv/bin/python bench/spark_cluster.py [--events 200000] [--per-trigger 50000] [--smoke]

A broker holds `--events` JSON events (user, event time) in one topic; each mode runs
`headwater pipelines run windows` (tumbling one-minute windows per user, exactly-once into
SQLite) from the start of the topic with `--per-trigger` events per micro-batch, as its own
driver process: local[2]; the cluster (a master and two workers, one core and 1 GiB each)
with spark.cores.max=1 (one executor); and with both executors. events/s = events / the
query's time (session start excluded, reported apart). Every mode must write the same
window counts, or the bench fails (`--smoke` skips the one-worker mode). On a 2-core
machine the cluster adds JVMs and network hops and no cores: what it shows is the cost
of going distributed; docs/scaling.md says what a bigger cluster adds.
"""
from __future__ import annotations

import argparse
import json
import random
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from headwater.testing import BrokerProcess, SparkStandaloneCluster, bench_arguments, produce_all

TOPIC = "bench-events"
BASE_MS = 1_700_000_000_000
# Events 2 s apart in event time: even the smoke run's 400 close windows (the pipeline's
# lateness is 2 minutes, its windows one minute).


def fill(bootstrap: str, events: int, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, partitions)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(1)
    produce_all(producer, TOPIC, (json.dumps({"event_id": f"e{i}", "user_id": f"u{rng.randrange(50)}",
                                              "ts_ms": BASE_MS + i * 2_000}).encode() for i in range(events)))
    if producer.flush(120):
        raise RuntimeError("events not acknowledged")


def run(master: str, bootstrap: str, workdir: Path, per_trigger: int, conf: list[str]) -> dict:
    """One `headwater pipelines run windows` driver: its timings and what it wrote."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "headwater", "pipelines", "run", "windows", "--master", master,
                           "--bootstrap-server", bootstrap, "--output", str(workdir), "--trigger", "available-now",
                           "--set", f"events={TOPIC}",
                           "--set", f"per-trigger={per_trigger}", *conf], capture_output=True, text=True,
                          env=SparkStandaloneCluster.driver_env())
    wall = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"{master}: {done.stderr[-3000:]}")
    batches, seconds = re.search(r"windows: (\d+) micro-batches in ([\d.]+) s", done.stdout).groups()
    db = sqlite3.connect(workdir / "windows.db")
    counts = sorted(db.execute("SELECT start_ms, user_id, events FROM window_counts"))
    db.close()
    return {"batches": int(batches), "query_s": float(seconds), "wall_s": wall, "counts": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--per-trigger", type=int, default=50_000, help="events per micro-batch")
    parser.add_argument("--partitions", type=int, default=2)
    args = bench_arguments(parser, smoke={"events": 400, "per_trigger": 200})
    results = {}
    with tempfile.TemporaryDirectory(prefix="headwater-bench-") as tmp:
        tmp = Path(tmp)
        with BrokerProcess(tmp / "data") as broker, SparkStandaloneCluster(tmp / "cluster", workers=2) as cluster:
            fill(broker.bootstrap, args.events, args.partitions)
            modes = [("local[2]", "local[2]", []),
                     ("cluster, 1 worker", cluster.master_url, ["--conf", "spark.cores.max=1"]),
                     ("cluster, 2 workers", cluster.master_url, [])]
            if args.smoke:  # each mode is a driver JVM of its own: the smoke run keeps two
                del modes[1]
            for name, master, conf in modes:
                results[name] = run(master, broker.bootstrap, tmp / re.sub(r"\W+", "-", name), args.per_trigger,
                                    conf)
    reference = results["local[2]"]["counts"]
    for name, result in results.items():
        if result["counts"] != reference or not reference:
            raise SystemExit(f"{name} wrote other window counts than local mode")
    table = Table(title=f"windowed pipeline: {args.events:,} events, {args.per_trigger:,} per micro-batch, "
                        f"{args.partitions} partitions (same input, same run)")
    for column in ("mode", "micro-batches", "query s", "events/s", "driver start s"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for name, r in results.items():
        table.add_row(name, str(r["batches"]), f"{r['query_s']:.1f}", f"{args.events / r['query_s']:,.0f}",
                      f"{r['wall_s'] - r['query_s']:.1f}")
    Console().print(table)


if __name__ == "__main__":
    main()
