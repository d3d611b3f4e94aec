"""Chapter: stream processing on Spark. The shop's morning (orders, searches, clicks,
profile changes, payments: `shop_events`) goes into Headwater topics and through the
pipelines of `headwater.pipelines`: each one a Structured Streaming query reading the
`headwater` source with trigger(availableNow=True) into an exactly-once sink. The
pipelines run one after another (several transformWithState queries started together
once left a Python worker waiting forever for its state server); each prints its results
and checks them.

Every answer is checked against plain Python (`stream_truth`) as the chapter runs: a
difference raises `CheckFailed`, and `make demo` exits non-zero.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import functions as F
from rich.table import Table

from headwater.demo import stream_truth as truth
from headwater.demo.shop_events import MINUTE, Morning, morning
from headwater.pipelines import (cep, changelog, enrichment, exactly_once, lateness, materialized_view, window_join,
                                 windows)

LATENESS, LATENESS_MS = "5 minutes", 5 * MINUTE
ORDER = "event_id string, user_id string, product_id string, quantity int, ts_ms long"
SEARCH = "event_id string, session_id string, user_id string, term string, ts_ms long"
CLICK = "event_id string, session_id string, user_id string, product_id string, ts_ms long"
PAYMENT = "event_id string, card_id string, status string, ts_ms long"
PROFILE = "name string, tier string, city string"
COMPACTED = {"cleanup.policy": "compact"}
# One partition each, so maxOffsetsPerTrigger cuts the same micro-batches in every run.
TOPICS = {"order-events": {}, "searches": {}, "clicks": {}, "payments": {}, "payment-alerts": {},
          "user-profiles": COMPACTED, "shop-orders": COMPACTED, "shop-products": COMPACTED}
# Micro-batches per event stream (a final one without data follows): the orders take
# three, for the watermark to overtake the too-late ones; two show the others' ordering.
BATCHES = {"order-events": 3, "searches": 2, "clicks": 2, "payments": 2}


class CheckFailed(Exception):
    """A pipeline's answer from Spark differs from the plain-Python one."""


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


def _in_cents(view: dict) -> dict:
    return {product: (name, n, round(revenue, 2)) for product, (name, n, revenue) in view.items()}


def _table(title: str, *columns: str, numbers: int = 0) -> Table:
    """A table whose last `numbers` columns hold numbers (aligned right)."""
    table = Table(title=title)
    for i, column in enumerate(columns):
        table.add_column(column, justify="right" if i >= len(columns) - numbers else "left")
    return table


class Chapter:
    """The pipelines, each run as a query, printed and checked in turn."""

    def __init__(self, bootstrap: str, console, spark, workdir: Path, events: Morning):
        self.bootstrap, self.console, self.spark, self.workdir = bootstrap, console, spark, workdir
        self.morning = events
        self.streams = {"order-events": events.orders, "searches": events.searches, "clicks": events.clicks,
                        "payments": events.payments}
        self.per_batch = {topic: -(-len(stream) // BATCHES[topic]) for topic, stream in self.streams.items()}
        self.queries = []

    # -- plumbing ------------------------------------------------------------------

    def produce(self) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(t, 1, 1, config=c) for t, c in TOPICS.items()]).values():
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
        return lateness.micro_batches(self.streams[topic], self.per_batch[topic])

    def admitted(self, topic: str):
        """(events kept, too-late events dropped, final watermark) for a query of one topic."""
        return lateness.admitted(self.batches(topic), LATENESS_MS)

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
        """answers: name=(Spark's, plain Python's)."""
        for name, (got, expected) in answers.items():
            if got != expected:
                raise CheckFailed(f"{what}: {name} from Spark differ from plain Python: {_difference(got, expected)}")
        self.console.print(f"[green]✓[/] {what}: Spark's answers equal plain Python's")

    # -- the pipelines -------------------------------------------------------------

    # Each is a generator: it starts its queries and yields; resumed, it waits for
    # them, prints and checks their results.

    def order_windows(self):
        orders = lateness.on_time(self.events("order-events", ORDER), "event_time", LATENESS)
        starts = [F.unix_millis("window_start").alias("start_ms"), "events"]
        tumbling_query = self.start("tumbling windows", windows.tumbling_counts(orders, "event_time", "10 minutes")
                                  .select(*starts), self.upsert("tumbling", "start_ms"))
        hopping_query = self.start("hopping windows", windows.hopping_counts(orders, "event_time", "20 minutes",
                                                                             "10 minutes").select(*starts),
                                   self.upsert("hopping", "start_ms"))
        yield
        self.wait(tumbling_query, hopping_query)
        tumbling = dict(self.rows("tumbling", "start_ms, events"))
        hopping = dict(self.rows("hopping", "start_ms, events"))

        kept, dropped, watermark = self.admitted("order-events")
        table = _table("orders per window of event time", "window from", "10-min tumbling", "20-min hopping",
                       numbers=2)
        for start in sorted(set(tumbling) | set(hopping)):
            table.add_row(clock(start), *(str(found.get(start, "open" if start + size > watermark else "-"))
                                          for found, size in ((tumbling, 10 * MINUTE), (hopping, 20 * MINUTE))))
        self.console.print(table)
        spark_dropped = lateness.dropped_events(tumbling_query)
        self.console.print(
            f"{truth.late_events(kept)} orders arrived late but within the {LATENESS} allowed, and count in their "
            f"windows; {spark_dropped} arrived too late (placed offline, delivered 40 minutes on): dropped, and "
            f"counted as dropped by Spark (numRowsDroppedByWatermark); one order delivered twice counts once. "
            f"Watermark at the end: {clock(watermark)} (windows ending after it are still open).")
        self.check("windows", tumbling=(tumbling, truth.window_counts(kept, watermark, 10 * MINUTE)),
                   hopping=(hopping, truth.window_counts(kept, watermark, 20 * MINUTE, 10 * MINUTE)),
                   dropped=((spark_dropped, lateness.dropped_events(hopping_query)), (dropped, dropped)))

    def click_sessions(self):
        clicks = lateness.on_time(self.events("clicks", CLICK), "event_time", LATENESS)
        sessions = windows.session_counts(clicks, "event_time", "5 minutes", ["user_id"])
        query = self.start("session windows", sessions.select(
            "user_id", F.unix_millis("window_start").alias("start_ms"), F.unix_millis("window_end").alias("end_ms"),
            "events"), self.upsert("sessions", "user_id", "start_ms"))
        yield
        self.wait(query)
        got = {(u, s): (e, n) for u, s, e, n in self.rows("sessions", "user_id, start_ms, end_ms, events")}
        kept, _, watermark = self.admitted("clicks")

        table = _table("click sessions per user (a session ends after 5 minutes without a click)", "user",
                       "sessions: first click - end (clicks)")
        for user in sorted({u for u, _ in got}):
            table.add_row(user, ", ".join(f"{clock(s)}-{clock(e)} ({n})" for (u, s), (e, n) in sorted(got.items())
                                          if u == user))
        self.console.print(table)
        self.check("session windows", sessions=(got, truth.sessions(kept, watermark, 5 * MINUTE)))

    def click_through(self):
        searches = self.events("searches", SEARCH).withColumnRenamed("event_id", "search_id")
        clicks = self.events("clicks", CLICK).withColumnRenamed("event_id", "click_id")
        outcomes_path = self.workdir / "search_outcomes"
        query = self.start("searches x clicks", window_join.search_outcomes(
            lateness.on_time(searches, "event_time", LATENESS, ["search_id"]),
            lateness.on_time(clicks, "event_time", LATENESS, ["click_id"])),
            exactly_once.ParquetPerBatch(outcomes_path))
        yield
        self.wait(query)
        outcomes = self.spark.read.parquet(str(outcomes_path))
        rows = outcomes.collect()
        pairs = {(r.search_id, r.click_id) for r in rows if r.clicked}
        misses = {r.search_id for r in rows if not r.clicked}
        rates = {r.term: (r.searches, r.clicked_searches) for r in window_join.click_through_rates(outcomes).collect()}

        table = _table("click-through rate per search term", "term", "searches", "clicked", "CTR", numbers=3)
        for term, (n, clicked) in sorted(rates.items()):
            table.add_row(term, str(n), str(clicked), f"{clicked / n:.0%}")
        self.console.print(table)
        want_pairs, want_misses = truth.search_outcomes(self.morning.searches, self.morning.clicks, 10 * MINUTE,
                                                        LATENESS_MS)
        undecided = len(self.morning.searches) - len({s for s, _ in pairs} | misses)
        self.console.print(f"a search counts as clicked when a click of the same session follows within 10 "
                           f"minutes; {undecided} searches without a click are still open (the watermark has not "
                           f"passed their 10 minutes)")
        self.check("stream-stream join", pairs=(pairs, want_pairs), misses=(misses, want_misses),
                   rates=(rates, truth.click_through(self.morning.searches, want_pairs, want_misses)))

    def enriched_clicks(self):
        clicks = self.events("clicks", CLICK).select(F.col("event_id").alias("click_id"), "user_id", "event_time")
        profiles = changelog.changes(self.records("user-profiles"), PROFILE)  # the whole table in the first batch
        query = self.start("clicks x user profiles", enrichment.enrich_clicks(clicks, profiles, LATENESS).select(
            "click_id", "user_id", F.unix_millis("click_time").alias("click_ms"), "profile"),
            self.upsert("enriched_clicks", "click_id"))
        yield
        self.wait(query)
        got = {c: (u, t, p and json.loads(p))
               for c, u, t, p in self.rows("enriched_clicks", "click_id, user_id, click_ms, profile")}

        changes = [{"event_id": f"change:{seq}", "user_id": user, "row": row, "ts_ms": t, "kind": enrichment.CHANGE,
                    "seq": seq} for seq, (user, row, t) in enumerate(self.morning.profiles)]
        batches = [[{**c, "kind": enrichment.CLICK} for c in chunk]
                   for chunk in self.batches("clicks")]
        batches[0] += changes
        table = _table("clicks x user profiles, as of each click", "time", "user", "click", "tier", "city")
        previous = {}
        for click, (user, t, profile) in sorted(got.items(), key=lambda item: item[1][1]):
            if user not in previous or previous[user] != profile:
                table.add_row(clock(t, True), user, click, *(profile[k] if profile else "-" for k in ("tier", "city")))
            previous[user] = profile
        self.console.print(table)
        self.console.print(f"{len(got)} clicks enriched; shown: each user's first click and every click that sees "
                           f"a changed profile (cho deleted at 09:20, ben upgraded at 09:25, ana moved at 09:30)")
        self.check("stream-table join", enriched=(got, truth.profiles_at_clicks(batches, LATENESS_MS)))

    def revenue_view(self):
        view_db = self.workdir / "view.db"
        tables = self.records("shop-orders,shop-products")

        def maintain():  # one name, so one checkpoint: a second run goes on where the first stopped
            return self.start("revenue view", tables, materialized_view.RevenueView(view_db, "shop-orders",
                                                                                   "shop-products"))

        first_run = maintain()
        yield
        self.wait(first_run)
        before = _in_cents(materialized_view.read_view(view_db))
        orders = {o["event_id"]: o for o in self.morning.orders}
        products = dict(self.morning.products)
        want_before = truth.revenue_per_product(orders, products)
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True})
        for topic, key, row in self.morning.table_changes:
            producer.produce(f"shop-{topic}", None if row is None else json.dumps(row), key)
            table = orders if topic == "orders" else products
            if row is None:
                del table[key]
            else:
                table[key] = row
        if producer.flush(30):
            raise RuntimeError("the table changes were not acknowledged")
        self.wait(maintain())
        after = _in_cents(materialized_view.read_view(view_db))

        table = _table("revenue per product: orders x products, maintained from both changelogs",
                       "product", "name", "orders", "revenue", "after the changes", numbers=3)
        for product in sorted(set(before) | set(after)):
            name, n, revenue = before[product]
            then = after.get(product)
            changed = "[bold]" if then != before[product] else ""
            table.add_row(product, name, str(n), f"{revenue:,.2f}",
                          f"{changed}{then[1]} orders, {then[2]:,.2f}" if then else "[bold]gone")
        self.console.print(table)
        self.console.print("the changes: tent's price 200.00 -> 180.00 (an update), rope removed from the "
                           "catalogue and order o042 cancelled (deletes, as tombstones)")
        self.check("table-table join", before=(before, _in_cents(want_before)),
                   after=(after, _in_cents(truth.revenue_per_product(orders, products))))

    def fraud_patterns(self):
        payments = self.events("payments", PAYMENT).withColumnRenamed("event_id", "payment_id")
        matches = cep.failures_then_success(lateness.on_time(payments, "event_time", LATENESS, ["payment_id"]))
        query = self.start("payment patterns", matches.select(
            "card_id", F.unix_millis("first_failure").alias("first_failure_ms"),
            F.unix_millis("success_time").alias("success_ms"), "failures", "payment_id"),
            exactly_once.TopicPerBatch({"bootstrap.servers": self.bootstrap}, "payment-alerts", "card_id"))
        yield
        self.wait(query)
        alerts = (self.spark.read.format("headwater").option("kafka.bootstrap.servers", self.bootstrap)
                  .option("subscribe", "payment-alerts").load().collect())
        got = {tuple(json.loads(bytes(r.value)).values()) for r in alerts}

        table = _table("payment-alerts (complex events)", "card", "first failure", "success", "payment",
                       "failures", numbers=1)
        for card, first, success, failures, payment in sorted(got):
            table.add_row(card, clock(first, True), clock(success, True), payment, str(failures))
        self.console.print(table)
        self.console.print("the pattern: three or more failed payments on a card, then a success, within 10 "
                           "minutes. card-4242's second failure arrived after its success: the pattern runs in "
                           "event-time order. card-1881 (success 11 minutes after its failures) and card-7007 (two "
                           "failures) raise no alert.")
        kept, _, watermark = self.admitted("payments")
        self.check("complex event processing", alerts=(got, truth.card_testing(kept, watermark, cep.WINDOW_MS)))


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


def run(bootstrap: str, console, spark=None) -> None:
    """The chapter against a broker; a SparkSession can be passed in (it is then left
    running), otherwise one is started, its output in a log, and stopped."""
    console.rule("[bold]Stream processing on Spark: windows, joins, a materialized view, patterns")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="headwater-streams-") as tmp:
        workdir, own_session = Path(tmp), spark is None
        if own_session:
            import headwater.spark

            console.print("starting Spark in local mode (a JVM: about 10 s)...")
            try:
                with _jvm_output_to(workdir / "spark.log"):
                    spark = headwater.spark.session(app_name="headwater-demo")
            except Exception:
                console.print((workdir / "spark.log").read_text()[-3000:])
                raise
        chapter = Chapter(bootstrap, console, spark, workdir, morning())
        try:
            chapter.produce()
            pipelines = [pipeline() for pipeline in (
                chapter.order_windows, chapter.click_sessions, chapter.click_through, chapter.enriched_clicks,
                chapter.revenue_view, chapter.fraud_patterns)]
            for pipeline in pipelines:
                next(pipeline)  # start its queries
                next(pipeline, None)  # its results, checked
        finally:
            for query in chapter.queries:
                query.stop()  # those still running when a check failed
            if own_session:
                spark.stop()
    console.print(f"{len(chapter.queries)} Spark queries; {time.monotonic() - started:.0f} s for the chapter")
