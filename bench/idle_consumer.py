"""What one idle consumer on many partitions costs the broker, with and without fetch sessions.

    .venv/bin/python bench/idle_consumer.py [--partitions N] [--seconds S] [--smoke]

One consumer is assigned every partition of a topic at its end, so every fetch finds
nothing and long-polls for its ``fetch.wait.max.ms`` (500 ms by default in both clients).
For each broker and client the figure is the broker process's CPU time over ``--seconds``
(user + system, from /proc) as a percentage of one core. Brokers, side by side in the
same run: Headwater with fetch sessions (KIP-227, the default), Headwater with them off
(``--max-incremental-fetch-session-cache-slots 0``: every fetch names and answers every
partition, as before sessions), and the peer, librdkafka's mock broker (C, in a process of
its own). Clients: confluent-kafka (librdkafka never asks for a fetch session, so its
fetches are full with or without them) and kafka-python (which uses sessions once the
broker opens them; it does not get past bootstrapping from the mock broker). The column with
no consumer shows each broker's own idle cost.
"""
from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Callable

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, TopicPartition as KafkaTopicPartition
from rich.console import Console
from served_requests import served_requests
from tables import table

from headwater.testing import BrokerProcess, bench_arguments, bench_workdir, cpu_seconds, mock_cluster_process

TOPIC = "idle"


def create_topic(bootstrap: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})   # kept alive until the result is in
    admin.create_topics([NewTopic(TOPIC, partitions)])[TOPIC].result(120)


def confluent_idle(bootstrap: str, partitions: int, stop: threading.Event) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-bench", "enable.auto.commit": False,
                         "auto.offset.reset": "latest"})
    consumer.assign([TopicPartition(TOPIC, p) for p in range(partitions)])
    while not stop.is_set():
        consumer.poll(0.2)   # librdkafka fetches on its own threads; polling only serves callbacks
    consumer.close()


def kafka_python_idle(bootstrap: str, partitions: int, stop: threading.Event) -> None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="latest")
    consumer.assign([KafkaTopicPartition(TOPIC, p) for p in range(partitions)])
    while not stop.is_set():
        consumer.poll(timeout_ms=200)   # kafka-python fetches only inside poll
    consumer.close()


def fetches(console_url: str | None) -> float:
    """Fetch requests the broker has answered so far (from its /metrics), or NaN for the mock."""
    return math.nan if console_url is None else served_requests(console_url).get("Fetch", 0.0)


def broker_load(pid: int, console_url: str | None, client: Callable | None, bootstrap: str, partitions: int,
                seconds: float, warm_up: float) -> dict[str, str]:
    """The broker's CPU (% of one core) and fetches per second over ``seconds`` while ``client`` idled on it."""
    stop = threading.Event()
    thread = threading.Thread(target=client, args=(bootstrap, partitions, stop)) if client else None
    if thread:
        thread.start()
    time.sleep(warm_up)
    answered = fetches(console_url)   # scraped outside the measured window: /metrics costs CPU too
    used, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    cpu, elapsed = cpu_seconds(pid) - used, time.monotonic() - start
    rate = (fetches(console_url) - answered) / elapsed
    stop.set()
    if thread:
        thread.join()
    per_fetch = cpu * 1000 / (rate * elapsed) if rate > 0 else math.nan
    return {"% of one core": f"{cpu / elapsed * 100:.2f}%",
            "fetches/s": "-" if math.isnan(rate) else f"{rate:.1f}",
            "CPU ms per fetch": "-" if math.isnan(per_fetch) else f"{per_fetch:.2f}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--partitions", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each idle consumer is measured")
    parser.add_argument("--warm-up", type=float, default=3.0,
                        help="seconds before the count starts (assignment, metadata and the first, full fetch)")
    args = bench_arguments(parser, {"partitions": 50, "seconds": 0.5, "warm_up": 0.25})

    workdir = bench_workdir("headwater-bench-idle-")
    flags = ("--flush", "never", "--max-partitions-per-request", str(args.partitions), "--http-listener", "127.0.0.1:0")
    clients = {"none": None, "confluent-kafka": confluent_idle, "kafka-python": kafka_python_idle}
    rows = []
    with BrokerProcess(workdir / "on", *flags) as on, \
            BrokerProcess(workdir / "off", *flags, "--max-incremental-fetch-session-cache-slots", "0") as off, \
            mock_cluster_process({TOPIC: args.partitions}) as (mock_pid, mock_bootstrap):
        brokers = {"Headwater, sessions on": (on.proc.pid, on.console_url, on.bootstrap),
                   "Headwater, sessions off": (off.proc.pid, off.console_url, off.bootstrap),
                   "librdkafka mock broker (C)": (mock_pid, None, mock_bootstrap)}
        for broker in (on, off):
            create_topic(broker.bootstrap, args.partitions)
        for client, idle in clients.items():
            for name, (pid, console_url, bootstrap) in brokers.items():
                if client == "kafka-python" and console_url is None:
                    continue   # kafka-python 3 does not get past bootstrapping from the mock broker
                rows.append({"consumer": client, "broker": name,
                             **broker_load(pid, console_url, idle, bootstrap, args.partitions, args.seconds,
                                          args.warm_up)})
    Console(width=150).print(table(f"Broker CPU with one idle consumer on {args.partitions:,} partitions, "
                                   f"{args.seconds:g} s each", rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
