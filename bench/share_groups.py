"""Queues on the log: acknowledged messages/s of a share group with 1, 4 and 8 consumers on one
partition, next to a classic consumer group reading the same topic, on Headwater and on Apache
Kafka 4.4's own share groups (KIP-932), and next to RabbitMQ.

    .venv/bin/python bench/share_groups.py [--messages 20000] [--size 100] [--rabbit-messages 60000]
        [--rabbit-seconds 3] [--consumers 1 4 8] [--headwater-only] [--smoke]

Each broker gets the same topic of one partition, filled by the same producer (acks=all), and
the same consumers, with two clients:
- confluent-kafka ShareConsumers (implicit acknowledgement: each poll acknowledges the previous
  one's records), each in its own process; the rate is the acknowledgements the broker answered
  while they read (the acknowledgement commit callback) over the time from the first delivery to
  the last answer. The last poll's acknowledgement is left out: it rides on a ShareFetch that
  finds nothing and waits out its max wait (500 ms) on either broker, a fixed tail of close;
- Kafka's own Java client: bench/ShareRate.java, run from source on Kafka's jars, the same
  consumers as KafkaShareConsumers, threads of one JVM, with the same clock. (Kafka's
  ShareConsumerPerformance tool was not used: its clock starts before the consumers join the
  group, and at these sizes it measures mostly the join: 7 s for 300 records in a trial here.)
Apache Kafka is one KRaft node with its default configs and the JVM options kafka-server-start.sh
gives it (headwater.testing.KafkaCluster(1, jvm_options=KAFKA_PRODUCTION_OPTIONS), whose
storage is formatted with the feature share.version=2: share groups on, as Kafka 4.1 and later
enable them; Kafka never fsyncs on this path), started once per run; Headwater runs with its
defaults (--flush always).
The classic group is one confluent-kafka Consumer committing at the end (a log reader
acknowledges by offset). Every row carries the load average (1 minute) of the machine while its
figures were taken.

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

from headwater.testing import (KAFKA_PRODUCTION_OPTIONS, KafkaCluster, bench_arguments, peer_command, produce_all,
                               start_broker)
from tables import table  # bench/tables.py

CONSUMERS = [1, 4, 8]
RABBIT_START_S = 30
QUEUE = "bench-work"
TOPIC = "work"


def _share_consumer(bootstrap, group, topic, total, done, spans):
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 500,
                              "log_level": 3})
    confirmed = [0, None]     # acknowledgements the broker has answered, and when the last answer came

    def answered(offsets, error):
        if error is None:
            confirmed[0] += sum(len(acked) for acked in offsets.values())
            confirmed[1] = time.monotonic()
    consumer.set_acknowledgement_commit_callback(answered)
    consumer.subscribe([topic])
    first, mine = None, 0
    while done.value < total:
        batch = [m for m in consumer.poll(0.1) if not m.error()]
        if batch:
            first = first or time.monotonic()
            mine += len(batch)
            with done.get_lock():
                done.value += len(batch)
    # The last poll's acknowledgement rides on a ShareFetch that finds nothing and waits out
    # fetch.wait.max.ms (500 ms) on either broker, a fixed tail of close rather than of the
    # rate: only acknowledgements answered while consuming count, up to the last answer
    # (all of them, up to the close, when they came in one poll and none was answered yet).
    if confirmed[0]:
        spans.put((first, confirmed[1], confirmed[0]))
    consumer.close()
    if not confirmed[0]:
        spans.put((first, time.monotonic(), mine))


def _run_pool(target, args, consumers: int, total: int) -> float:
    """Acknowledged messages per second over ``consumers`` processes: those the broker answered
    while they read, over the time from the first delivery to the last answer."""
    ctx = mp.get_context("spawn")
    done, spans = ctx.Value("q", 0), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, total, done, spans)) for _ in range(consumers)]
    for proc in procs:
        proc.start()
    results = [spans.get(timeout=600) for _ in procs]
    for proc in procs:
        proc.join()
    start = min(first for first, _, _ in results if first is not None)
    return sum(acked for _, _, acked in results) / (max(end for _, end, _ in results) - start)


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


def fill(bootstrap: str, messages: int, payload: bytes) -> AdminClient:
    """The topic of one partition with `messages` records; an admin client of the broker."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    produce_all(producer, TOPIC, itertools.repeat(payload, messages), poll_every=1)
    producer.flush(60)
    return admin


def read_from_earliest(admin: AdminClient, group: str) -> None:
    """A new share group starts at the log's end by default; these read the records already there."""
    earliest = ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource(
            ResourceType.GROUP, group, incremental_configs=[earliest])]).values():
        future.result(30)


def java_share_rates(bootstrap: str, group_prefix: str, total: int, counts: list[int]) -> dict[int, float]:
    """bench/ShareRate.java (Kafka's Java KafkaShareConsumer, threads of one JVM) at each consumer
    count: acknowledged records/s by count."""
    done = subprocess.run(peer_command("kafka", "kafka-clients", str(Path(__file__).with_name("ShareRate.java")),
                                       bootstrap, TOPIC, group_prefix, str(total), *map(str, counts)),
                          capture_output=True, text=True, timeout=600)
    if done.returncode:
        raise RuntimeError(f"ShareRate.java failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return {int(n): float(rate) for n, rate in (line.split() for line in done.stdout.splitlines())}


def measure_broker(system: str, bootstrap: str, args, figures: dict) -> None:
    """The topic filled, then its share groups with each client at 1, 4 and 8 consumers and a
    classic group, each a new group reading every record: into `figures` (see `record`)."""
    admin = fill(bootstrap, args.messages, b"x" * args.size)
    for n in args.consumers:
        group = f"bench-share-{n}"
        read_from_earliest(admin, group)
        rate = _run_pool(_share_consumer, (bootstrap, group, TOPIC), n, args.messages)
        record(figures, f"{system} share group (confluent-kafka)", n, rate)
    if args.headwater_only:
        return
    for n in args.consumers:
        read_from_earliest(admin, f"bench-share-java-{n}")
    for n, rate in java_share_rates(bootstrap, "bench-share-java-", args.messages, args.consumers).items():
        record(figures, f"{system} share group (Java KafkaShareConsumer)", n, rate)
    record(figures, f"{system} classic group (offsets)", 1, _classic_rate(bootstrap, TOPIC, args.messages))


def record(figures: dict, row: str, consumers: int, rate: float | str) -> None:
    """figures[row][consumers] = (the rate, the load average as it was taken)."""
    figures.setdefault(row, {})[consumers] = (rate, os.getloadavg()[0])


def ratio_row(figures: dict, client: str) -> dict:
    """Headwater's rate over Kafka's, consumer count by consumer count, for one client."""
    mine, theirs = figures[f"Headwater share group ({client})"], figures[f"Apache Kafka share group ({client})"]
    return {n: (mine[n][0] / theirs[n][0], None) for n in mine}


def rows(figures: dict) -> list[dict]:
    def cell(value) -> str:
        return value if isinstance(value, str) else f"{value:,.2f}" if value < 10 else f"{value:,.0f}"

    columns, out = sorted({n for row in figures.values() for n in row}), []
    for name, row in figures.items():
        loads = sorted({f"{load:.1f}" for _, load in row.values() if load is not None}, key=float)
        out.append({"system (client)": name, **{f"{n} consumer{'s' * (n > 1)}": cell(row[n][0]) if n in row else "–"
                                                for n in columns},
                    "load avg": "–".join(loads[::len(loads) - 1 or 1])})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100, help="message bytes")
    parser.add_argument("--rabbit-messages", type=int, default=60_000, help="messages PerfTest fills the queue with")
    parser.add_argument("--rabbit-seconds", type=int, default=3, help="seconds PerfTest drains the queue for")
    parser.add_argument("--consumers", type=int, nargs="+", default=list(CONSUMERS), help="share group sizes to run")
    parser.add_argument("--headwater-only", action="store_true",
                        help="only Headwater's share groups with confluent-kafka (to profile the broker): no Java "
                             "client, no classic group, no Kafka, no RabbitMQ")
    args = bench_arguments(parser, smoke={"messages": 300, "rabbit_messages": 2_000, "rabbit_seconds": 2})
    if args.smoke and args.consumers == CONSUMERS:
        args.consumers = [2]   # one count, with more than one consumer: the peers' start is the smoke's cost
    figures: dict[str, dict[int, tuple]] = {}
    with tempfile.TemporaryDirectory(prefix="headwater-bench-share-") as tmp:
        broker = start_broker(Path(tmp) / "data", "--num-partitions", "1")
        try:
            measure_broker("Headwater", broker.bootstrap, args, figures)
        finally:
            broker.stop()
        if args.headwater_only:
            Console(width=160).print(table(f"Acknowledged msgs/s: {args.messages:,} messages of {args.size} bytes, "
                                           "one partition", rows(figures)))
            return
        with KafkaCluster(nodes=1, jvm_options=KAFKA_PRODUCTION_OPTIONS) as kafka:
            measure_broker("Apache Kafka", kafka.bootstrap, args, figures)
        for client in ("confluent-kafka", "Java KafkaShareConsumer"):
            figures[f"Headwater / Kafka ({client})"] = ratio_row(figures, client)
        rabbit = RabbitMQ(Path(tmp))
        try:
            for n in args.consumers:
                record(figures, "RabbitMQ durable queue, manual acks (PerfTest)", n,
                       rabbit.drain_rate(args.rabbit_messages, args.size, n, args.rabbit_seconds))
        finally:
            rabbit.stop()
    Console(width=160).print(table(f"Acknowledged msgs/s: {args.messages:,} messages of {args.size} bytes, one partition; "
                          f"RabbitMQ: a queue of {args.rabbit_messages:,} drained for {args.rabbit_seconds} s",
                          rows(figures)))


if __name__ == "__main__":
    main()
