"""How the broker's cost grows with partitions, connections and consumer groups, Headwater next
to Apache Kafka 4.4 (one KRaft node, default configs, the JVM options of kafka-server-start.sh:
1 GB heap, G1) and to librdkafka's mock broker (C), each running the same workload in a process
of its own.

    .venv/bin/python bench/cost_growth.py [--messages N] [--rate R] [--plot PNG] [--point AXIS=N ...]
                                          [--compression CODEC] [--profile DIR] [--headwater-only] [--smoke]

One point of the curve: a fresh topic of P partitions; C idle consumers (raw connections, each
long-polling an empty topic every 500 ms, as an idle librdkafka consumer does); G consumer
groups of one confluent-kafka consumer each, subscribed to the topic; one producer (acks=all,
linger.ms=1, compression.type none unless --compression says) sending N 100-byte messages at R
msg/s round-robin over the partitions. Figures:
the broker process's CPU time (user + system, from /proc; Kafka's: its JVM's, compiler and
collector threads included) over the run per message produced
and per message delivered (each group reads every message), and the produce → consume
latency p50/p99 seen by the first group; for Headwater also the Produce and Fetch requests it
served in the measured window (its /metrics), since its CPU per message follows the fetch
count. One dimension moves at a time from the base point (1 partition, 1 idle connection, 1
group): partitions 1, 100, 1,000, 5,000, 10,000; connections 1, 100, 1,000; groups 1, 10, 100.
Before its base point each broker runs it once unmeasured, so the JVM's first compilations are
not charged to one point. The curves are drawn to --plot
(docs/cost_growth.png); each row's CPU and p99 are also given as a ratio to Kafka's and to the
mock's at the same point, and every row carries the load average (1 minute) at its end. A point
that cannot be set up in CREATE_S (Kafka's thousands of partitions on one node: the topic
created and its first message read by every group), or whose set-up fails, is reported as not
run, not left out; so is every later point of a broker that has exited. ``--point partitions=1000`` measures
that point alone (repeatable, no plot); ``--profile DIR`` records each Headwater point with
py-spy (``pip install -e '.[bench]'``; DIR/<point>.txt, the hottest functions by own and total
samples); ``--headwater-only`` skips the peers (for iterating on the broker: its rows then carry
no ratios).
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import math
import os
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from rich.console import Console

from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.testing import (KAFKA_PRODUCTION_OPTIONS, BrokerProcess, KafkaCluster, bench_arguments, bench_workdir,
                               cpu_seconds, mock_cluster_process, proc_stat, wait_until)

from served_requests import served_requests  # bench/served_requests.py
from tables import table  # bench/tables.py

console = Console(stderr=True)
BASE = {"partitions": 1, "connections": 1, "groups": 1}
AXES = {"partitions": [1, 100, 1_000, 5_000, 10_000], "connections": [1, 100, 1_000], "groups": [1, 10, 100]}
IDLE_TOPIC = "idle"
IDLE_POLL_S = 0.5   # librdkafka's fetch.wait.max.ms
CREATE_S = 300   # a topic not created (nor its first message read by every group) in this is a point not run
CREATE_STEP = 5_000
WARM_UP = ("warm-up", 1)   # the base point's shape, run once unmeasured
KAFKA = "Apache Kafka 4.4, 1 node"
MOCK = "librdkafka mock (C)"
COUNTED = ("Produce", "Fetch")   # the requests each Headwater point counts over its measured window


@dataclass
class Point:
    broker: str
    axis: str
    value: int
    cpu_us_per_message: float
    cpu_us_per_delivery: float
    p50_ms: float
    p99_ms: float
    load: float   # the load average (1 minute) when the point ended
    requests: dict[str, float] = dataclasses.field(default_factory=dict)   # COUNTED, served in the window (Headwater)
    failed: str = ""   # why the point has no figures (it could not be run: a topic not created in time)


def idle_fetch_request() -> bytes:
    """One Fetch v11 of the empty idle topic, framed: what an idle consumer sends every 500 ms."""
    Fetch = MESSAGE_CLASSES[ApiKey.FETCH][0]
    Topic = Fetch.FetchTopic
    request = Fetch(replica_id=-1, max_wait_ms=int(IDLE_POLL_S * 1000), min_bytes=1, max_bytes=1 << 20,
                    isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                    topics=[Topic(topic=IDLE_TOPIC, partitions=[Topic.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                        partition_max_bytes=1 << 20)])])
    request.API_VERSION = 11
    request.with_header(correlation_id=1, client_id="idle-consumer")
    return bytes(request.encode(header=True, framed=True))


class IdleConsumers:
    """``count`` connections on one asyncio loop (a thread), each long-polling the idle topic."""

    def __init__(self, bootstrap: str, count: int):
        self.host, port = bootstrap.split(",")[0].rsplit(":", 1)
        self.port, self.count = int(port), count
        self.request = idle_fetch_request()
        self.loop = asyncio.new_event_loop()
        self.connected = threading.Semaphore(0)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> IdleConsumers:
        self.thread.start()
        self.tasks = [asyncio.run_coroutine_threadsafe(self._consume(), self.loop) for _ in range(self.count)]
        for _ in range(self.count):
            self.connected.acquire()
        return self

    async def _consume(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self.connected.release()
        try:
            while True:
                started = time.monotonic()
                writer.write(self.request)
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                # A broker that answers at once (the mock ignores max_wait) is polled at the same pace.
                await asyncio.sleep(max(0.0, IDLE_POLL_S - (time.monotonic() - started)))
        finally:
            writer.close()

    def __exit__(self, *exc) -> None:
        for task in self.tasks:
            task.cancel()
        asyncio.run_coroutine_threadsafe(asyncio.sleep(0.1), self.loop).result(10)   # the cancellations run
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    """At most CREATE_STEP partitions a request: Kafka's controller refuses a topic of 10,000 at
    once (POLICY_VIOLATION, "excessively large batch operation"), so larger ones grow by steps."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, min(partitions, CREATE_STEP), 1)], operation_timeout=60)[name].result(CREATE_S)
    for count in range(2 * CREATE_STEP, partitions + CREATE_STEP, CREATE_STEP):
        admin.create_partitions([NewPartitions(name, min(count, partitions))],
                                operation_timeout=60)[name].result(CREATE_S)
    wait_until(lambda: len(admin.list_topics(name, timeout=30).topics[name].partitions) == partitions,
               timeout=CREATE_S, what=f"{partitions:,} partitions of {name} in the metadata")   # the producer's too


def run_point(bootstrap: str, pid: int, name: str, shape: dict, messages: int, rate: int, mock: bool,
              served: Callable[[], dict[str, float]] | None,
              compression: str = "none") -> tuple[float, float, list[float], dict[str, float]]:
    """(broker CPU s, deliveries, sorted latencies in s, the COUNTED requests served) of one point
    of the curve; the requests are counted by ``served`` (a broker's /metrics; none for the peers)."""
    topic, partitions, connections, groups = f"cost-{name}", shape["partitions"], shape["connections"], shape["groups"]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1,
                         "compression.type": compression})
    if not mock:   # the mock broker answers no CreateTopics: its topics are made with it (mock_topics)
        create_topic(bootstrap, topic, partitions)
    producer.produce(topic, b"warm", partition=0)   # the consumers read it before the clock starts
    producer.flush(30)
    consumers = [Consumer({"bootstrap.servers": bootstrap, "group.id": f"{topic}-g{g}", "auto.offset.reset": "earliest",
                           "enable.auto.commit": True, "fetch.wait.max.ms": 100}) for g in range(groups)]
    for consumer in consumers:
        consumer.subscribe([topic])
    received = [0] * groups
    latencies: list[float] = []
    done = threading.Event()

    def poll(indexes: range) -> None:
        while not done.is_set():
            for g in indexes:
                for msg in consumers[g].consume(1000, 0.05 if len(indexes) == 1 else 0):
                    if msg.error():
                        continue
                    received[g] += 1
                    if g == 0 and msg.value() != b"warm":
                        latencies.append(time.perf_counter() - float(msg.value()))

    # Group 0 (the latencies) has a thread of its own; the other groups, if any, share one. An
    # empty share would spin, holding the GIL, and make the producer's pacing send in bursts.
    pollers = [threading.Thread(target=poll, args=(indexes,)) for indexes in (range(0, 1), range(1, groups)) if indexes]
    for poller in pollers:
        poller.start()
    try:
        with IdleConsumers(bootstrap, connections):
            wait_until(lambda: all(received), timeout=CREATE_S, what=f"{groups} groups to read the first message")
            served_before = served() if served else {}   # scraped outside the CPU's window: /metrics costs CPU too
            cpu_before = cpu_seconds(pid)
            start = time.perf_counter()
            for i in range(messages):
                target = start + i / rate
                while (now := time.perf_counter()) < target:
                    time.sleep(min(target - now, 0.001))
                producer.produce(topic, repr(time.perf_counter()).encode().ljust(100), partition=i % partitions)
                producer.poll(0)
            producer.flush(60)
            wait_until(lambda: all(n >= messages + 1 for n in received), timeout=300,
                       what="every group to read every message")
            cpu = cpu_seconds(pid) - cpu_before
            served_after = served() if served else {}
    finally:
        done.set()
        for poller in pollers:
            poller.join()
        for consumer in consumers:
            consumer.close()
    requests = {api: served_after.get(api, 0.0) - served_before.get(api, 0.0) for api in COUNTED} if served else {}
    return cpu, messages * groups, sorted(latencies), requests


def mock_topics(only: list[tuple[str, int]]) -> dict[str, int]:
    """Every topic a run on the mock broker uses (of the ``only`` points, if any), with its partitions
    (run_point's names)."""
    points = only or [(axis, value) for axis, values in AXES.items() for value in values]
    return {IDLE_TOPIC: 1, **{f"cost-{axis}-{value}": {**BASE, axis: value}["partitions"]
                              for axis, value in [WARM_UP, *points]}}


def measure(broker: str, bootstrap: str, pid: int, args, mock: bool = False,
            served: Callable[[], dict[str, float]] | None = None) -> list[Point]:
    """The base point, then each axis grown from it (or only the --point ones); ``served`` counts
    the requests the broker has served (Headwater's /metrics)."""
    if not mock:
        create_topic(bootstrap, IDLE_TOPIC, 1)

    def point(axis: str, value: int) -> Point:
        shape = {**BASE, axis: value}
        console.print(f"[bold]{broker}[/]: {shape}")
        try:
            if not alive(pid):
                raise RuntimeError("the broker process has exited")
            cpu, deliveries, latencies, requests = run_point(bootstrap, pid, f"{axis}-{value}", shape, args.messages,
                                                             args.rate, mock, served, args.compression)
        except (TimeoutError, KafkaException, RuntimeError) as exc:   # said in the table, not left out of it
            console.print(f"[yellow]{broker} {shape}: not run: {exc}[/]")
            nan = float("nan")
            return Point(broker, axis, value, nan, nan, nan, nan, os.getloadavg()[0], failed=f"not run: {exc}")
        measured = Point(broker, axis, value, cpu / args.messages * 1e6, cpu / deliveries * 1e6,
                         statistics.median(latencies) * 1000,
                         latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000, os.getloadavg()[0], requests)
        console.print(f"  {measured}")   # a long run cut short still leaves its points
        return measured

    if args.point:
        return [point(axis, value) for axis, value in args.point]
    if not args.smoke:   # a smoke's figures mean nothing: it spares the peers' start the extra point
        point(*WARM_UP)
    base = point("partitions", BASE["partitions"])
    points = []
    for axis, values in AXES.items():
        points += [point(axis, value) if value != BASE[axis] else dataclasses.replace(base, axis=axis)
                   for value in values]
    return points


def alive(pid: int) -> bool:
    """The process runs (a child that died and was not reaped yet is a zombie, state Z)."""
    try:
        return proc_stat(pid)[0] != "Z"
    except FileNotFoundError:
        return False


def parse_point(text: str) -> tuple[str, int]:
    axis, _, value = text.partition("=")
    if axis not in AXES or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r}: expected AXIS=N with AXIS one of {', '.join(AXES)}")
    return axis, int(value)


def headwater_broker(workdir: Path, profile: Path | None, max_partitions: int) -> tuple[BrokerProcess, int]:
    """The broker and the pid whose CPU is measured: under ``py-spy record`` when profiling (it
    samples its own child: attaching to a running process needs ptrace rights a container lacks)."""
    py_spy = Path(sys.executable).with_name("py-spy")
    if profile is not None and not py_spy.exists():
        raise SystemExit(f"--profile needs py-spy beside {sys.executable}: pip install -e '.[bench]'")
    wrapper = [] if profile is None else [str(py_spy), "record", "--format", "raw",
                                          "--rate", "100", "-o", str(profile.with_suffix(".raw")), "--"]
    broker = BrokerProcess(workdir / "data", "--flush", "never", "--max-partitions-per-request", str(max_partitions),
                           "--max-partitions", str(2 * max_partitions), "--http-listener", "127.0.0.1:0",
                           wrapper=wrapper).start()   # its /metrics counts the requests served
    if profile is None:
        return broker, broker.proc.pid
    spy = broker.proc.pid
    return broker, int(Path(f"/proc/{spy}/task/{spy}/children").read_text().split()[0])


def profile_summary(raw: Path, top: int = 40) -> str:
    """py-spy's collapsed stacks (one line per distinct stack and its samples) as the hottest
    functions: own samples (the function itself running) and total (it or what it called)."""
    own, total, samples = collections.Counter(), collections.Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames, count = stack.split(";"), int(count)
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    lines = [f"{samples} samples", "", "own %  function"]
    lines += [f"{100 * n / samples:5.1f}  {f}" for f, n in own.most_common(top)]
    lines += ["", "total %  function"]
    lines += [f"{100 * n / samples:5.1f}  {f}" for f, n in total.most_common(top)]
    return "\n".join(lines) + "\n"


def plot(points: list[Point], path: Path, args) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, cells = plt.subplots(2, len(AXES), figsize=(13, 7))
    for column, axis in enumerate(AXES):
        for broker in dict.fromkeys(p.broker for p in points):
            mine = [p for p in points if p.broker == broker and p.axis == axis]
            x = [p.value for p in mine]
            cells[0][column].plot(x, [p.cpu_us_per_delivery for p in mine], marker="o", label=broker)
            cells[1][column].plot(x, [p.p99_ms for p in mine], marker="o", label=f"{broker} p99")
            cells[1][column].plot(x, [p.p50_ms for p in mine], marker=".", linestyle="--", label=f"{broker} p50")
        for row, label in enumerate(("broker CPU µs per delivered message", "produce → consume latency, ms")):
            cell = cells[row][column]
            cell.set_xscale("log")
            cell.set_yscale("log")
            cell.set_xlabel(axis)
            cell.set_ylabel(label)
            cell.grid(True, alpha=0.3)
        cells[0][column].legend(fontsize=7)
        cells[1][column].legend(fontsize=7)
    figure.suptitle(f"Cost growth: {args.messages:,} x 100-byte messages at {args.rate:,} msg/s per point "
                    f"(base: 1 partition, 1 idle connection, 1 group)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per point")
    parser.add_argument("--rate", type=int, default=2_000, help="messages per second")
    parser.add_argument("--plot", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "cost_growth.png")
    parser.add_argument("--point", type=parse_point, action="append", default=[],
                        help="measure only this point, e.g. partitions=1000 (repeatable; no plot)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                        help="the producer's compression.type (its one-record batches compressed)")
    parser.add_argument("--profile", type=Path, help="a directory: record the Headwater broker with py-spy there")
    parser.add_argument("--headwater-only", action="store_true",
                        help="measure Headwater alone, without Apache Kafka and the mock (rows without ratios)")
    workdir = bench_workdir("headwater-cost-")
    args = bench_arguments(parser, {"messages": 100, "rate": 500, "plot": workdir / "cost_growth.png"})
    if args.smoke:
        AXES.update(partitions=[1, 10], connections=[1, 10], groups=[1, 3])
    profile = None
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        profile = args.profile / ("headwater-" + "-".join(f"{a}{v}" for a, v in args.point or [("all", 0)]))

    points = []
    broker, pid = headwater_broker(workdir, profile, max(AXES["partitions"] + [v for _, v in args.point]))
    try:
        points += measure("Headwater", broker.bootstrap, pid, args,
                          served=lambda: served_requests(broker.console_url))
    finally:
        if profile is not None:   # py-spy writes its samples once its child is gone
            os.kill(pid, signal.SIGKILL)
            broker.proc.wait()
            profile.with_suffix(".txt").write_text(profile_summary(profile.with_suffix(".raw")))
            console.print(f"profile: {profile.with_suffix('.txt')}")
        broker.kill()   # a clean shutdown of thousands of partitions is no part of the measure
    if not args.headwater_only:
        with KafkaCluster(nodes=1, jvm_options=KAFKA_PRODUCTION_OPTIONS) as kafka:
            points += measure(KAFKA, kafka.bootstrap, kafka.procs[0].pid, args)
        with mock_cluster_process(mock_topics(args.point)) as (mock_pid, mock_bootstrap):
            points += measure(MOCK, mock_bootstrap, mock_pid, args, mock=True)
    if not args.point and not args.headwater_only:
        plot(points, args.plot, args)
        console.print(f"plot: {args.plot}")
    peers = {(p.broker, p.axis, p.value): p for p in points}
    Console(width=200).print(table(f"Cost growth: {args.messages:,} messages at {args.rate:,} msg/s per point", [{
        "broker": p.broker, "grows": p.axis, "to": f"{p.value:,}", "CPU µs/msg": figure(p.cpu_us_per_message),
        "CPU µs/delivery": figure(p.cpu_us_per_delivery), "p50 ms": figure(p.p50_ms, 2), "p99 ms": figure(p.p99_ms, 2),
        **ratios(p, peers.get((KAFKA, p.axis, p.value)), "Kafka"), **ratios(p, peers.get((MOCK, p.axis, p.value)), "mock"),
        **{f"{api} reqs": figure(p.requests.get(api, math.nan), 0) for api in COUNTED},
        "load avg": f"{p.load:.1f}"} for p in points]))
    for p in points:
        if p.failed:
            print(f"{p.broker}, {p.axis} = {p.value:,}: {p.failed}")
    return 0


def figure(value: float, decimals: int = 1) -> str:
    return "–" if math.isnan(value) else f"{value:,.{decimals}f}"


def ratios(point: Point, peer: Point | None, name: str) -> dict[str, str]:
    """A row's CPU per delivery and p99 as multiples of a peer's at the same point (none under
    --headwater-only)."""
    def ratio(mine: float, theirs: float | None) -> str:
        return figure(mine / theirs, 2) if theirs else "–"   # a smoke run's mock may use no measurable CPU
    return {f"CPU × {name}": ratio(point.cpu_us_per_delivery, peer and peer.cpu_us_per_delivery),
            f"p99 × {name}": ratio(point.p99_ms, peer and peer.p99_ms)}


if __name__ == "__main__":
    sys.exit(main())
