"""Spark source benchmark: Headwater through the `headwater` source vs Spark's own Kafka
source (`format("kafka")`) reading the same topic, vs Spark's rate source, and
produce-to-window-result latency.

    .venv/bin/python bench/spark_source.py [--rows 400000] [--rounds 3] [--rate 200] [--seconds 30]
                                           [--latency-only] [--conf KEY=VALUE ...] [--smoke]

1. Throughput: rows/s from a topic through the source into the `noop` sink, next to
   Spark's own Kafka connector reading the same topic from the same broker (the jars
   `make jvm` resolves: headwater.testing.spark_kafka_jars) and the same rows from Apache
   Kafka 4.4 (one KRaft node, default configs and kafka-server-start.sh's JVM options:
   headwater.testing.KafkaCluster(1, jvm_options=KAFKA_PRODUCTION_OPTIONS), started
   once per run, the topic filled by the same producer), to Spark's built-in
   `rate-micro-batch` source and to a Python source that only yields one prebuilt
   Arrow batch (the floor cost of any Python data source), same batch size (the Kafka
   sources: the same maxOffsetsPerTrigger), same session; rows/s = rows / time spent
   in micro-batches (Spark's triggerExecution). A warm-up round, then the five take
   turns; the median round
   is reported, with the CPU per row it cost each process (the JVM, the Python
   processes Spark runs: task workers and the source's planner, and the broker read
   from: Headwater's, or Kafka's JVM; the load average (1 minute) at the end of the
   round is printed with each round).
   headwater / floor is also given round by round (the two ran back to back, so load
   that drifts over the run weighs on both), with the median of those ratios.
2. Latency: events produced at a steady rate; a 1-second tumbling window count in
   update mode; for every window update, the time it is in the sink (foreachBatch has
   collected it) minus the produce time of the newest event in it. Median and p95, the
   update's path (produced -> its micro-batch starts -> the sink is called -> the update is
   collected: the batch's job reads the source, shuffles and updates the state), and where
   the micro-batches' time went: median and p95 of each phase of Spark's
   StreamingQueryProgress.durationMs. The first sixth of the run is left out of the
   figures and shown apart (the first micro-batches fork the Python workers, and Spark's
   code is still being compiled). (Until 2026-11-28 the time was taken when the sink was
   called, before the batch's job ran, and from the first micro-batch on: the figures of
   issue #27 were measured so.) With --latency-only no Kafka node is started (it would be
   another JVM on the machine's cores); --conf sets a Spark setting for the session, to
   compare settings run against run.
3. The same window count in Spark's real-time mode (`trigger(realTime=...)`, Spark 4.1+):
   Spark's own Kafka source reads the same broker at the same rate (Headwater's Python
   source has no real-time mode), long-running tasks update the window per record, and the
   Kafka sink writes each update to a topic of the same broker; an update's time is when a
   consumer of that topic has it, minus the produce time of the newest event in it. A
   real-time batch lasts --real-time-batch; at each batch's end Spark checkpoints and starts
   the next, and the records that arrive meanwhile wait (the output says how many batches
   ended inside the measured time). Real-time mode runs every stage at once, so it runs in a
   session of its own with a task slot for each source partition and each shuffle partition
   (local[3]; the session of the rows above has 2 as before: with 3 their figures were worse).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import itertools
import os
import statistics
import time
from pathlib import Path

import pyarrow as pa
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

import headwater.spark
from headwater.spark.record_columns import arrow_schema
from headwater.spark.source import SCHEMA
from headwater.testing import (KAFKA_PRODUCTION_OPTIONS, BrokerProcess, KafkaCluster, bench_arguments, bench_workdir,
                               cpu_seconds, proc_stat, produce_all, spark_kafka_jars)


# The floor's Arrow batches are about the size of the headwater reader's: one 1 MiB fetch
# of 100-byte records is ~8,700 rows.
FLOOR_BATCH_ROWS = 10_000
FROM_KAFKA = "Spark's kafka source (Apache Kafka)"


def fill(bootstrap: str, topic: str, rows: int, size: int = 100, partitions: int = 2) -> None:
    """The topic, of `partitions`, with `rows` keyed rows."""
    admin = AdminClient({"bootstrap.servers": bootstrap})   # held: the future fails once the client is gone
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none"})
    produce_all(producer, topic, itertools.repeat(b"x" * size, rows), keys=(str(i).encode() for i in range(rows)))
    producer.flush(120)


def batch_rate(query) -> tuple[int, float]:
    progress = [p for p in query.recentProgress if p.numInputRows]
    rows = sum(p.numInputRows for p in progress)
    seconds = sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000
    return rows, rows / seconds if seconds else 0.0


def median_run(runs: list[tuple]) -> tuple:
    return sorted(runs, key=lambda run: run[1])[len(runs) // 2]


class PrebuiltSource(DataSource):
    """The floor of any Python data source: every batch is `rowsPerBatch` rows of one
    Arrow record batch built once, with the Kafka source's schema. What this reaches is
    the Python Data Source API's own limit (Python worker -> Arrow -> JVM) here."""

    @classmethod
    def name(cls) -> str:
        return "prebuilt"

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema):
        return PrebuiltReader(int(self.options["rowsPerBatch"]))


class PrebuiltRange(InputPartition):
    def __init__(self, rows: int):
        self.rows = rows


class PrebuiltReader(DataSourceStreamReader):
    def __init__(self, rows_per_batch: int):
        self.rows_per_batch = rows_per_batch
        self.batches = 0

    def initialOffset(self) -> dict:
        return {"batch": 0}

    def latestOffset(self) -> dict:
        self.batches += 1
        return {"batch": self.batches}

    def partitions(self, start: dict, end: dict):
        return [PrebuiltRange(self.rows_per_batch // 2)] * 2

    def read(self, partition: PrebuiltRange):
        n = FLOOR_BATCH_ROWS
        batch = pa.RecordBatch.from_arrays([
            pa.array([b"123456"] * n), pa.array([b"x" * 100] * n), pa.array(["bench"] * n),
            pa.array([0] * n, pa.int32()), pa.array(range(n), pa.int64()),
            pa.array([time.time_ns() // 1000] * n, pa.timestamp("us", tz="UTC")), pa.array([0] * n, pa.int32()),
        ], schema=arrow_schema(False))
        for _ in range(partition.rows // n):
            yield batch


def spark_cpu(jvm: int) -> tuple[float, float]:
    """(the JVM's CPU seconds, its Python processes'), from /proc: the Python side is the
    live processes below the JVM plus the ones it has reaped (its children's time)."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stats[int(pid)] = [int(x) for x in proc_stat(int(pid))[1:15]]   # ppid (0) ... cstime (13)
        except (OSError, ValueError):  # gone meanwhile
            continue
    below, parents = set(), {jvm}
    while parents:
        parents = {pid for pid, f in stats.items() if f[0] in parents} - below
        below |= parents
    # utime, stime: 10, 11; cutime, cstime (its reaped children): 12, 13
    python = sum(sum(stats[pid][10:14]) for pid in below) + sum(stats[jvm][12:14])
    return sum(stats[jvm][10:12]) / tick, python / tick


def throughput(stream, batches: int, checkpoint: Path, cpu) -> tuple[int, float, tuple]:
    """Rows per second spent in `batches` micro-batches of `stream` into the noop sink,
    and the CPU seconds per row of each process `cpu()` measures."""
    # A pause between batches lets the query be stopped without interrupting one
    # (the pause is not counted: the rate is rows per second spent in batches).
    before = cpu()
    query = (stream.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(processingTime="1 second").start())
    while (query.lastProgress is None or query.lastProgress["batchId"] < batches - 1
           or query.status["isTriggerActive"]):
        if not query.isActive:   # it failed (a Python worker that never connected back, on a loaded machine)
            raise query.exception()
        time.sleep(0.05)
    query.stop()
    rows, rate = batch_rate(query)
    return rows, rate, tuple((after - first) / rows for after, first in zip(cpu(), before))


def sources(spark, bootstrap: str, kafka_bootstrap: str, topic: str, per_batch: int) -> dict:
    """The five streams measured side by side, each 2 partitions, `per_batch` rows a batch."""
    def topic_stream(source: str, servers: str):
        return (spark.readStream.format(source).option("kafka.bootstrap.servers", servers).option("subscribe", topic)
                .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", per_batch).load())
    return {
        "headwater": lambda: topic_stream("headwater", bootstrap),
        "Spark's kafka source": lambda: topic_stream("kafka", bootstrap),
        FROM_KAFKA: lambda: topic_stream("kafka", kafka_bootstrap),
        "prebuilt Arrow (Python floor)": lambda: (spark.readStream.format("prebuilt")
                                                  .option("rowsPerBatch", per_batch).load()),
        "rate-micro-batch": lambda: (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_batch)
                                     .option("numPartitions", 2).load()),
    }


def window_counts(events):
    """The measured query: events per 1-second tumbling window, and the newest event's time."""
    return (events.withWatermark("timestamp", "1 second")
            .groupBy(F.window("timestamp", "1 second")).agg(F.count(F.lit(1)).alias("n"),
                                                            F.max("timestamp").alias("newest")))


def produce_steadily(producer: Producer, topic: str, rate: int, seconds: float, tick) -> None:
    """`rate` events a second into `topic` for `seconds`, calling `tick()` between sends."""
    start, sent = time.monotonic(), 0
    while time.monotonic() - start < seconds:
        tick()
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            producer.produce(topic, b"e", str(sent).encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)


def real_time_latency(spark, bootstrap, topic, rate, seconds, batch, workdir, cpu) -> tuple[list[float], int, tuple]:
    """The same window count in real-time mode (Spark's Kafka source and sink, batches of
    `batch`): every update's latency after the warm-up (the first sixth of `seconds`), how
    many real-time batches ended after it, and the CPU seconds per second of each process
    `cpu()` measures after it."""
    updates = f"{topic}-updates"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(updates, 1, 1)])[updates].result(60)
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest").load())
    query = (window_counts(events).select(F.unix_micros("newest").cast("string").alias("value"))
             .writeStream.outputMode("update").format("kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("topic", updates).option("checkpointLocation", str(workdir / "ck-real-time"))
             .trigger(realTime=batch).start())
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench", "enable.auto.commit": False})
    consumer.assign([TopicPartition(updates, 0, OFFSET_BEGINNING)])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    # The query has its starting offsets (and its tasks run) once an event's update comes out;
    # there is no progress to wait for until its first batch ends.
    while not consumer.consume(100, 1.0):
        if not query.isActive:
            raise query.exception()
        producer.produce(topic, b"e")
        producer.flush(30)

    measured_from, latencies = time.time() + seconds // 6, []
    first = before = None

    def ended() -> int:   # the last real-time batch that ended
        return (query.lastProgress or {"batchId": -1})["batchId"]

    def collect() -> None:
        nonlocal first, before
        if first is None and time.time() >= measured_from:
            first, before = (ended(), time.monotonic()), cpu()
        for update in consumer.consume(1000, 0):
            newest = None if update.error() else int(update.value()) / 1e6
            if newest and newest >= measured_from:
                latencies.append(time.time() - newest)

    produce_steadily(producer, topic, rate, seconds, collect)
    wait_until = time.monotonic() + 3
    while time.monotonic() < wait_until:
        collect()
        time.sleep(0.002)
    after, batches, elapsed = cpu(), ended() - first[0], time.monotonic() - first[1]
    # Stopping interrupts the long-running tasks, which log their aborted writes as errors, some
    # after stop() returns: the session is stopped next, quietly.
    spark.sparkContext.setLogLevel("OFF")
    query.stop()
    consumer.close()
    return latencies, batches, tuple((a - b) / elapsed for a, b in zip(after, before))


# Each window update's path, in seconds: produced (its newest event) -> its micro-batch starts
# -> the sink is called -> the update is collected in the sink.
PATH = ("produced -> batch starts", "batch start -> sink called", "sink called -> collected")
# The processes whose CPU `cpu()` reads, in its order.
PROCESSES = ("JVM", "Spark's Python processes", "broker")


def latency(spark, bootstrap, topic, rate, seconds, workdir, cpu) -> tuple[list[tuple[float, ...]], list[float],
                                                                    list[dict], tuple, tuple]:
    """Every window update's path (PATH) after the warm-up (the first sixth of `seconds`),
    the warm-up's latencies, the durationMs of every micro-batch after it, and the CPU
    seconds per micro-batch and per second of each process `cpu()` measures after it."""
    sunk: dict[int, tuple[float, float, list[float]]] = {}   # batch id: called, collected, newest events
    # A Python list, read once: iterating the Java list in every batch ended in a Java
    # NoSuchElementException that PySpark's error handler converts by ~14 class lookups through
    # py4j's imports, each searching every jar: ~9 ms of the stream thread's a batch.
    collectors = list(spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans())
    gc_ms: dict[int, int] = {}   # batch id: the JVM's collection time so far, when its sink was called

    def record(batch, batch_id):
        called = time.time()
        gc_ms[batch_id] = sum(collector.getCollectionTime() for collector in collectors)
        updates = batch.collect()
        sunk[batch_id] = (called, time.time(), [r.newest.timestamp() for r in updates])

    events = (spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest").load())
    query = (window_counts(events).writeStream.outputMode("update").foreachBatch(record)
             .option("checkpointLocation", str(workdir / "ck-lat")).trigger(processingTime="0 seconds").start())
    while query.lastProgress is None:  # the source has its starting offsets
        time.sleep(0.1)

    measured_from, first, before, began = time.time() + seconds // 6, None, None, None

    def measure_from_now() -> None:
        nonlocal first, before, began
        if first is None and time.time() >= measured_from:
            first, before, began = query.lastProgress["batchId"], cpu(), time.monotonic()

    produce_steadily(Producer({"bootstrap.servers": bootstrap, "linger.ms": 0}), topic, rate, seconds,
                     measure_from_now)
    time.sleep(3)
    after, batches, elapsed = cpu(), max(1, query.lastProgress["batchId"] - first), time.monotonic() - began
    query.stop()
    paths, warm_up = [], []
    for p in query.recentProgress:
        if p.batchId not in sunk:
            continue
        started = datetime.datetime.fromisoformat(p.timestamp.replace("Z", "+00:00")).timestamp()
        called, collected, newest = sunk[p.batchId]
        if started < measured_from:
            warm_up.extend(collected - produced for produced in newest)
        else:
            paths.extend((started - produced, called - started, collected - called) for produced in newest)
    # A batch's GC: the JVM's collection time between its sink's call and the next batch's.
    gc = {i: {"GC (JVM, sink to sink)": gc_ms[i + 1] - gc_ms[i]} for i in gc_ms if i + 1 in gc_ms}
    return (paths, warm_up, [{**p.durationMs, **gc.get(p.batchId, {})} for p in query.recentProgress
                             if p.batchId > first],
            tuple((a - b) / batches for a, b in zip(after, before)), tuple((a - b) / elapsed for a, b in zip(after, before)))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))]


def phases(durations: list[dict]) -> str:
    """Median / p95 ms of each durationMs phase over the micro-batches, longest first."""
    names = sorted({name for d in durations for name in d},
                   key=lambda name: -statistics.median(d.get(name, 0) for d in durations))
    return "\n".join(f"  {name:<20}{statistics.median(d.get(name, 0) for d in durations):>8.0f}"
                     f"{percentile([d.get(name, 0) for d in durations], 0.95):>8.0f}" for name in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--per-batch", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds after the warm-up")
    parser.add_argument("--rate", type=int, default=200, help="events/s for the latency run")
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--latency-only", action="store_true", help="skip the throughput rounds (and Apache Kafka)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting for the session (repeatable)")
    parser.add_argument("--real-time-batch", default="5 minutes",
                        help="the real-time query's batch duration (trigger(realTime=...))")
    args = bench_arguments(parser, {"rows": 40_000, "per_batch": 20_000, "rounds": 1, "rate": 20, "seconds": 3})

    workdir = bench_workdir("hw-spark-bench-")
    kafka_node = contextlib.nullcontext() if args.latency_only else \
        KafkaCluster(nodes=1, jvm_options=KAFKA_PRODUCTION_OPTIONS)
    with BrokerProcess(workdir / "data", "--num-partitions", "2", "--flush", "never") as broker, kafka_node as kafka:
        if not args.latency_only:
            fill(broker.bootstrap, "bench", args.rows)
            fill(kafka.bootstrap, "bench", args.rows)
        # Python workers get 2 minutes, not 15 s, to connect back: a shared machine can be that
        # loaded. Every micro-batch's progress of the latency run is kept (Spark keeps 100).
        settings = {"spark.jars": ",".join(spark_kafka_jars()), "spark.python.authenticate.socketTimeout": "120s",
                    "spark.sql.streaming.numRecentProgressUpdates": "100000",
                    **dict(setting.split("=", 1) for setting in args.conf)}
        spark = headwater.spark.session(app_name="spark-source-bench", conf=settings)
        spark.dataSource.register(PrebuiltSource)
        streams = sources(spark, broker.bootstrap, kafka and kafka.bootstrap, "bench", args.per_batch)
        batches = args.rows // args.per_batch
        jvm = spark._jvm.ProcessHandle.current().pid()

        def cpu(broker_pid: int) -> tuple[float, float, float]:
            return (*spark_cpu(jvm), cpu_seconds(broker_pid))

        # Each source runs once to warm the JVM and the Python workers, then they take
        # turns; the median round counts, since this small machine is noisy.
        runs: dict[str, list[tuple]] = {name: [] for name in streams}
        for round_ in range(0 if args.latency_only else args.rounds + 1):
            figures = []
            for name, stream in streams.items():
                read_from = kafka.procs[0].pid if name == FROM_KAFKA else broker.proc.pid
                run = throughput(stream(), batches, workdir / f"ck-{round_}-{len(figures)}",
                                 functools.partial(cpu, read_from))
                figures.append(f"{name} {run[1]:,.0f}")
                if round_:
                    runs[name].append(run)
            print(f"round {round_}{' (warm-up)' if round_ == 0 else ''}: " + ", ".join(figures) + " rows/s"
                  f" (load average {os.getloadavg()[0]:.1f})", flush=True)
        lat, warm_up, durations, batch_cpu, second_cpu = latency(spark, broker.bootstrap, "latency", args.rate,
                                                                 args.seconds, workdir,
                                                                 functools.partial(cpu, broker.proc.pid))
        load = os.getloadavg()[0]
        spark.stop()
        # Real-time mode runs every stage at once: a task slot for each of the topic's 2 partitions
        # and for the shuffle partition. (The whole bench on local[3] made the micro-batch row slower.)
        spark = headwater.spark.session(master="local[3]", app_name="spark-source-bench", conf=settings)
        real_time = real_time_latency(spark, broker.bootstrap, "latency", args.rate, args.seconds,
                                      args.real_time_batch, workdir, functools.partial(cpu, broker.proc.pid))
        spark.stop()

    if not args.latency_only:
        throughput_table(runs)
    total = [sum(path) for path in lat]
    print(f"produce -> 1 s window update in the sink at {args.rate} events/s for {args.seconds} s: "
          f"{len(lat)} updates, median {statistics.median(total) * 1000:.0f} ms, "
          f"p95 {percentile(total, 0.95) * 1000:.0f} ms (load average {load:.1f})")
    if warm_up:
        print(f"  left out: the first {args.seconds // 6} s, {len(warm_up)} updates, the slowest "
              f"{max(warm_up) * 1000:.0f} ms")
    print(f"{'the update path, ms':<30}{'median':>8}{'p95':>8}")
    for i, name in enumerate(PATH):
        steps = [path[i] * 1000 for path in lat]
        print(f"  {name:<28}{statistics.median(steps):>8.0f}{percentile(steps, 0.95):>8.0f}")
    print(f"{len(durations)} micro-batches, durationMs{'median':>10}{'p95':>8}")
    print(phases(durations))
    print(cpu_line("CPU ms per micro-batch", batch_cpu, PROCESSES))
    print(cpu_line("  CPU ms per second", second_cpu, PROCESSES))
    updates, batches, (jvm, _, broker) = real_time
    print(f"real-time mode (Spark's kafka source and sink, batches of {args.real_time_batch}): {len(updates)} "
          f"updates, median {statistics.median(updates) * 1000:.0f} ms, p95 {percentile(updates, 0.95) * 1000:.0f} ms, "
          f"the slowest {max(updates) * 1000:.0f} ms; {batches} batches ended meanwhile "
          f"(load average {os.getloadavg()[0]:.1f})")
    # No Python runs in it (the micro-batch query's idle workers exiting meanwhile would show as less than none).
    print(cpu_line("  CPU ms per second", (jvm, broker), ("JVM", "broker")))


def cpu_line(label: str, cpu: tuple, names: tuple) -> str:
    return f"{label}: " + ", ".join(f"{name} {seconds * 1000:.0f}" for name, seconds in zip(names, cpu))


def throughput_table(runs: dict[str, list[tuple]]) -> None:
    print()
    medians = {name: median_run(r) for name, r in runs.items()}
    rate = medians["rate-micro-batch"][1]
    print(f"{'source -> noop sink, 2 partitions':<40}{'rows':>10}{'rows/s':>12}{'/ rate':>8}"
          f"{'CPU us/row: JVM':>17}{'Python':>8}{'broker':>8}")
    for name, (rows, rows_per_s, cpu_per_row) in medians.items():
        print(f"{name:<40}{rows:>10}{rows_per_s:>12,.0f}{rows_per_s / rate:>8.2f}"
              + "".join(f"{x * 1e6:>{w}.2f}" for x, w in zip(cpu_per_row, (17, 8, 8))))
    floor = medians["prebuilt Arrow (Python floor)"][1]
    ratios = [run[1] / floor_run[1] for run, floor_run in zip(runs["headwater"], runs["prebuilt Arrow (Python floor)"])]
    print(f"headwater / Python floor: {medians['headwater'][1] / floor:.2f} (medians); round by round "
          + ", ".join(f"{r:.2f}" for r in ratios) + f", median {statistics.median(ratios):.2f}")
    kafka = medians["Spark's kafka source"][1]
    print(f"headwater / Spark's kafka source: {medians['headwater'][1] / kafka:.2f} (medians)")
    print(f"headwater / Spark's kafka source reading Apache Kafka: "
          f"{medians['headwater'][1] / medians[FROM_KAFKA][1]:.2f} (medians)")
    print()


if __name__ == "__main__":
    main()
