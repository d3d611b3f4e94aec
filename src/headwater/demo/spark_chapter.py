"""The plumbing of the stream-processing chapter (`stream_processing`): its topics and
their micro-batches, reading them as streams, starting queries into exactly-once sinks,
reading the sinks back, and checking Spark's answers against the plain-Python ones of
`headwater.pipelines.reference`. A difference raises `CheckFailed`.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Iterator

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from rich.table import Table

from headwater.demo.checks import CheckFailed
from headwater.demo.shop_events import MINUTE, Morning
from headwater.pipelines import exactly_once, reference
from headwater.pipelines.catalog import PIPELINES, Run

LATENESS, LATENESS_MS = "5 minutes", 5 * MINUTE
COMPACTED = {"cleanup.policy": "compact"}
# One partition each, so maxOffsetsPerTrigger cuts the same micro-batches in every run.
TOPICS = {"order-events": {}, "searches": {}, "clicks": {}, "payments": {}, "payment-alerts": {},
          "user-profiles": COMPACTED, "shop-orders": COMPACTED, "shop-products": COMPACTED}
# Micro-batches per event stream (a final one without data follows): the orders take
# three, for the watermark to overtake the too-late ones; two show the others' ordering.
BATCHES = {"order-events": 3, "searches": 2, "clicks": 2, "payments": 2}


def clock(ms: int, seconds: bool = False) -> str:
    time_of_day = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return time_of_day.strftime("%H:%M:%S" if seconds else "%H:%M")


def _difference(got, expected) -> str:
    if isinstance(got, dict) and isinstance(expected, dict):
        wrong = [f"{k}: Spark {got.get(k, '-')} / Python {expected.get(k, '-')}"
                 for k in sorted(set(got) | set(expected), key=str) if got.get(k) != expected.get(k)]
    elif isinstance(got, set) and isinstance(expected, set):
        wrong = [f"only Spark has {x}" for x in got - expected] + [f"only Python has {x}" for x in expected - got]
    else:
        wrong = [f"Spark {got} / Python {expected}"]
    return "; ".join(map(str, wrong[:4])) + (f" (and {len(wrong) - 4} more)" if len(wrong) > 4 else "")


def report_table(title: str, *columns: str, numbers: int = 0) -> Table:
    """A table whose last `numbers` columns hold numbers (aligned right)."""
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="right" if i >= len(columns) - numbers else "left")
    return table


def check(console, what: str, **answers) -> None:
    """answers: name=(Spark's, plain Python's)."""
    for name, (got, expected) in answers.items():
        if got != expected:
            raise CheckFailed(f"{what}: {name} from Spark differ from plain Python: {_difference(got, expected)}")
    console.print(f"[green]✓[/] {what}: Spark's answers equal plain Python's")


def run_pipeline(spark, bootstrap: str, workdir: Path, name: str, **params) -> None:
    """Run a shipped pipeline over everything in its topics, outputs and checkpoints in `workdir`."""
    run = Run(spark, {"bootstrap.servers": bootstrap}, workdir / "checkpoints", workdir, {"availableNow": True},
              {**PIPELINES[name].params, **params})
    PIPELINES[name].start(run).awaitTermination()


def sqlite_rows(path, sql: str) -> list:
    db = sqlite3.connect(path)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


class Chapter:
    """What the scenes share: the morning's events and their topics, the micro-batches the
    queries read them in, queries started into sinks and read back, and the checks."""

    def __init__(self, bootstrap: str, console, spark, workdir: Path, events: Morning):
        self.bootstrap, self.console, self.spark, self.workdir = bootstrap, console, spark, workdir
        self.morning = events
        self.streams = {"order-events": events.orders, "searches": events.searches, "clicks": events.clicks,
                        "payments": events.payments}
        self.per_batch = {topic: -(-len(stream) // BATCHES[topic]) for topic, stream in self.streams.items()}
        self.queries = []

    def produce(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, config=c) for t, c in TOPICS.items()]).values():
            future.result(30)
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "linger.ms": 5})
        failed = []

        def send(topic, key, value, timestamp=0):
            producer.produce(topic, None if value is None else json.dumps(value), key, timestamp=timestamp,
                             on_delivery=lambda err, _: err and failed.append(err))

        m = self.morning
        for topic, stream in self.streams.items():
            for event in stream:
                send(topic, event["event_id"], event, event["ts_ms"])
        for user, row, changed in m.profiles:
            send("user-profiles", user, row, changed)  # the record time is the change's time
        for product_id, row in m.products.items():
            send("shop-products", product_id, row)
        for order in sorted({o["event_id"]: o for o in m.orders}.values(), key=lambda o: o["event_id"]):
            send("shop-orders", order["event_id"], {"product_id": order["product_id"], "quantity": order["quantity"]})
        if producer.flush(30) or failed:
            raise RuntimeError(f"producing the morning's events: {failed[:1] or 'not acknowledged'}")
        self.console.print(
            f"produced the morning's events: {len(m.orders)} orders, {len(m.searches)} searches, {len(m.clicks)} "
            f"clicks, {len(m.payments)} payments, {len(m.profiles)} profile changes, and the shop's orders and "
            f"products tables as compacted changelog topics")

    def records(self, topic: str, per_batch: int | None = None):
        reader = (self.spark.readStream.format("headwater").option("kafka.bootstrap.servers", self.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if per_batch:
            reader = reader.option("maxOffsetsPerTrigger", per_batch)
        return reader.load()

    def events(self, topic: str, schema: str):
        """An event topic as columns, with `event_time`, in this chapter's micro-batches."""
        return (self.records(topic, self.per_batch[topic])
                .select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
                .withColumn("event_time", F.timestamp_millis("ts_ms")))

    def start(self, name: str, frame, sink):
        """Start a query over everything in its topics into a foreachBatch sink."""
        query = (frame.writeStream.queryName(name).foreachBatch(sink)
                 .option("checkpointLocation", str(self.workdir / "checkpoints" / name.replace(" ", "-")))
                 .trigger(availableNow=True).start())
        self.queries.append(query)
        return query

    def wait(self, *queries) -> None:
        with self.console.status(f"Spark: {', '.join(q.name for q in queries)}..."):
            for query in queries:
                query.awaitTermination()

    def batches(self, topic: str) -> list[list]:
        """An event topic's events in the micro-batches the chapter's queries read."""
        return reference.micro_batches(self.streams[topic], self.per_batch[topic])

    def admitted(self, topic: str):
        """(events kept, too-late events dropped, final watermark) for a query of one topic."""
        return reference.admitted(self.batches(topic), LATENESS_MS)

    def upsert(self, table: str, *key: str):
        """Rows upserted into `table`, in a database file of its own."""
        return exactly_once.SqliteUpsert(self.workdir / f"{table}.db", table, list(key))

    def rows(self, table: str, columns: str) -> list:
        db = sqlite3.connect(self.workdir / f"{table}.db")
        try:
            return db.execute(f"SELECT {columns} FROM {table}").fetchall()
        finally:
            db.close()

    def check(self, what: str, **answers) -> None:
        check(self.console, what, **answers)

    def stop(self) -> None:
        """Stop the queries still running (after a failed check)."""
        for query in self.queries:
            query.stop()


@contextlib.contextmanager
def _jvm_output_to(log_path: Path):
    """Spark's JVM, started inside, inherits our stdout and stderr, where it and the
    Python workers of transformWithState chatter: it gets a log file instead."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with open(log_path, "ab") as log:
        for fd in saved:
            os.dup2(log.fileno(), fd)
    try:
        yield
    finally:
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def start_session(console, log_path: Path):
    """A local SparkSession for the demo, the JVM's output in `log_path`."""
    import headwater.spark

    console.print("starting Spark in local mode (a JVM: about 10 s)...")
    try:
        with _jvm_output_to(log_path):
            return headwater.spark.session(app_name="headwater-demo")
    except Exception:
        console.print(log_path.read_text()[-3000:])
        raise


@contextlib.contextmanager
def workspace(console, spark=None) -> Iterator[tuple]:
    """(SparkSession, working directory) for the chapter. A session passed in is left
    running; otherwise one is started, its output in a log, and stopped at the end."""
    with tempfile.TemporaryDirectory(prefix="headwater-streams-") as tmp:
        workdir, own_session = Path(tmp), spark is None
        if own_session:
            spark = start_session(console, workdir / "spark.log")
        try:
            yield spark, workdir
        finally:
            if own_session:
                spark.stop()
