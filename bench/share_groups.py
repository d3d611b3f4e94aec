"""Queues on the log: acknowledged messages/s of a share group with 1, 4 and 8 consumers on one
partition, next to a classic consumer group reading the same topic, and next to RabbitMQ.

    .venv/bin/python bench/share_groups.py [--messages 20000] [--size 100] [--rabbit-messages 60000]
        [--rabbit-seconds 3] [--consumers 1 4 8] [--headwater-only] [--smoke]

Share consumers are confluent-kafka ShareConsumers (implicit acknowledgement: each poll
acknowledges the previous one's records), each in its own process. The classic group is one
confluent-kafka Consumer committing at the end (a log reader acknowledges by offset). A rate is
messages over the time from the first delivery to the last acknowledgement.

RabbitMQ is Debian's rabbitmq-server, installed by this bench when missing and started as a
private node on a free port, measured with its own benchmark tool, PerfTest (`make jvm`
resolves it into build/jvm/perf-test/): one PerfTest run fills a durable queue with persistent
messages of the same size (publisher confirms), then another drains it with 1, 4 or 8
consumers acking each message manually (prefetch 500, as the share consumers' 500 records a
poll) for a fixed time; the rate is PerfTest's own "receiving rate avg". PerfTest stops on time
rather than on an empty queue, so its queue is filled with more messages than the topic; a
queue that ran dry before the time was up makes the figure a lower bound, shown with ≥.
"""
from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType
from rich.console import Console

from headwater.testing import bench_arguments, peer_command, produce_all, start_broker
from tables import table  # bench/tables.py

CONSUMERS = (1, 4, 8)
RABBIT_START_S = 30
QUEUE = "bench-work"


def _share_consumer(bootstrap, group, topic, total, done, spans):
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 500,
                              "log_level": 3})
    consumer.subscribe([topic])
    first = None
    while done.value < total:
        batch = [m for m in consumer.poll(0.1) if not m.error()]
        if batch:
            first = first or time.monotonic()
            with done.get_lock():
                done.value += len(batch)
    consumer.poll(0)          # acknowledges the last batch
    consumer.close()
    spans.put((first, time.monotonic()))


def _run_pool(target, args, consumers: int, total: int) -> float:
    """Messages per second from the first delivery to the last acknowledgement over ``consumers`` processes."""
    ctx = mp.get_context("spawn")
    done, spans = ctx.Value("q", 0), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, total, done, spans)) for _ in range(consumers)]
    for proc in procs:
        proc.start()
    results = [spans.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    start = min(first for first, _ in results if first is not None)
    return done.value / (max(end for _, end in results) - start)


def _classic_rate(bootstrap: str, topic: str, total: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-classic", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "log_level": 3})
    consumer.subscribe([topic])
    seen, first = 0, None
    while seen < total:
        batch = [m for m in consumer.consume(500, 0.5) if not m.error()]
        if batch:
            first = first or time.monotonic()
            seen += len(batch)
    consumer.commit(asynchronous=False)
    rate = seen / (time.monotonic() - first)
    consumer.close()
    return rate


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RabbitMQ:
    """A private rabbitmq-server node in a temporary directory, on free ports."""

    def __init__(self, tmp: Path):
        if shutil.which("rabbitmq-server") is None:
            subprocess.run(["apt-get", "install", "-y", "-qq", "rabbitmq-server"], check=True,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"}, capture_output=True)
        self.port, self.epmd_port = _free_port(), _free_port()   # a private epmd too, stopped with the node
        home = tmp / "rabbit"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "RABBITMQ_NODENAME": f"bench{self.port}@localhost",
               "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1", "RABBITMQ_NODE_PORT": str(self.port),
               "RABBITMQ_DIST_PORT": str(_free_port()), "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
               "RABBITMQ_LOG_BASE": str(home / "log"), "RABBITMQ_CONFIG_FILE": str(home / "none"),
               "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "plugins"), "RABBITMQ_PID_FILE": str(home / "pid"),
               "ERL_EPMD_PORT": str(self.epmd_port)}
        (home / "plugins").write_text("[].\n")
        self.proc = subprocess.Popen(["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=env, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        self.channel = self._connect()

    def _connect(self):
        import pika
        deadline = time.monotonic() + RABBIT_START_S
        while True:
            try:
                return pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port)).channel()
            except pika.exceptions.AMQPConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError("rabbitmq-server did not start") from None
                time.sleep(0.3)

    def perf_test(self, *args: str) -> str:
        """Runs PerfTest against this node; its output."""
        done = subprocess.run(peer_command("perf-test", "perf-test", "com.rabbitmq.perf.PerfTest",
                                           "--uri", f"amqp://127.0.0.1:{self.port}", "--queue", QUEUE,
                                           "--auto-delete", "false", "--metrics-format", "compact", *args),
                              capture_output=True, text=True, timeout=600)
        if done.returncode:
            raise RuntimeError(f"PerfTest {' '.join(args)} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return done.stdout

    def ready(self) -> int:
        """Messages in the queue waiting for a consumer (pika's passive declare: it fails if the queue
        is not durable)."""
        return self.channel.queue_declare(QUEUE, durable=True, passive=True).method.message_count

    def drain_rate(self, messages: int, size: int, consumers: int, seconds: int) -> str:
        """PerfTest fills the queue, then drains it with `consumers` manual-ack consumers for
        `seconds`: its receiving rate avg, marked ≥ if the queue ran dry before the time was up."""
        self.channel.queue_delete(QUEUE)
        self.perf_test("--producers", "1", "--consumers", "0", "--flag", "persistent", "--size", str(size),
                       "--pmessages", str(messages), "--confirm", "1000")
        output = self.perf_test("--producers", "0", "--consumers", str(consumers), "--predeclared",
                                "--qos", "500", "--time", str(seconds))
        rate = int(re.search(r"receiving rate avg: (\d+)", output).group(1))
        return f"{'≥ ' if self.ready() == 0 else ''}{rate:,}"

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, 15)
            self.proc.wait(30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, 9)
        subprocess.run(["epmd", "-port", str(self.epmd_port), "-kill"], capture_output=True)


def _rabbit_rows(tmp: Path, args: argparse.Namespace, rows: list[dict]) -> None:
    rabbit = RabbitMQ(tmp)
    try:
        for n in args.consumers:
            rate = rabbit.drain_rate(args.rabbit_messages, args.size, n, args.rabbit_seconds)
            rows.append({"system": "RabbitMQ durable queue, manual acks (PerfTest)", "consumers": str(n),
                         "acked msgs/s": rate})
    finally:
        rabbit.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="message bytes")
    parser.add_argument("--rabbit-messages", type=int, default=60_000, help="messages PerfTest fills the queue with")
    parser.add_argument("--rabbit-seconds", type=int, default=3, help="seconds PerfTest drains the queue for")
    parser.add_argument("--consumers", type=int, nargs="+", default=list(CONSUMERS), help="share group sizes to run")
    parser.add_argument("--headwater-only", action="store_true",
                        help="only the Headwater share groups (to profile the broker): no classic group, no RabbitMQ")
    args = bench_arguments(parser, smoke={"messages": 300, "rabbit_messages": 2_000, "rabbit_seconds": 2})
    console = Console()
    payload = b"x" * args.size
    rows = []
    with tempfile.TemporaryDirectory(prefix="headwater-bench-share-") as tmp:
        broker = start_broker(Path(tmp) / "data", "--num-partitions", "1")
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("work", 1, 1)])["work"].result(30)
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            produce_all(producer, "work", itertools.repeat(payload, args.messages), poll_every=1)
            producer.flush(60)
            for n in args.consumers:
                group = f"bench-share-{n}"
                earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
                for future in admin.incremental_alter_configs([ConfigResource(
                        ResourceType.GROUP, group, incremental_configs=[earliest])]).values():
                    future.result(30)
                rate = _run_pool(_share_consumer, (broker.bootstrap, group, "work"), n, args.messages)
                rows.append({"system": "Headwater share group", "consumers": str(n), "acked msgs/s": f"{rate:,.0f}"})
            if not args.headwater_only:
                rate = _classic_rate(broker.bootstrap, "work", args.messages)
                rows.append({"system": "Headwater classic group (offsets)", "consumers": "1",
                             "acked msgs/s": f"{rate:,.0f}"})
        finally:
            broker.stop()
        if not args.headwater_only:
            _rabbit_rows(Path(tmp), args, rows)
    console.print(table(f"{args.messages:,} messages of {args.size} bytes, one partition; RabbitMQ: a queue of "
                        f"{args.rabbit_messages:,} drained for {args.rabbit_seconds} s", rows))


if __name__ == "__main__":
    main()
