"""The shipped pipelines, by name: each one reads Kafka topics and writes an exactly-once
sink, so `headwater pipelines run NAME` can start it with no driver script.

A pipeline is a function from a `Run` (the session, the broker's client settings, where
checkpoints and outputs go, the trigger, its parameters) to a started streaming query.
Its parameters (topic names, lateness, window sizes, records per micro-batch) have
defaults listed in `Pipeline.params` and are overridden with `--set name=value`.
Event topics hold JSON values with an `event_id` and a `ts_ms` (event time, epoch ms);
a record of another shape goes to the pipeline's dead-letter topic (`dead_letter`), and
docs/spark.md lists each pipeline's input and output. `reference` gives each
pipeline's answer in plain Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from headwater.pipelines import (analytics, cep, clocks, dead_letter, derived, exactly_once, lateness,
                                 materialized_view, progress, standing_queries, window_join, windows)


@dataclass
class Run:
    spark: SparkSession
    client: dict  # librdkafka settings: bootstrap.servers and any security properties
    checkpoint: Path  # each pipeline's checkpoint is a directory below, named after it
    output: Path  # SQLite databases and Parquet datasets go here
    trigger: dict  # keyword arguments of DataStreamWriter.trigger
    params: dict[str, str] = field(default_factory=dict)
    source: str = "headwater"  # or Spark's own "kafka" connector: the same options, the same columns
    bad: list[DataFrame] = field(default_factory=list)  # each reader's bad records, for `start`

    def _read(self, topics: str) -> DataFrame:
        reader = self.spark.readStream.format(self.source).option("subscribe", topics)
        reader = reader.option("startingOffsets", "earliest")  # a new pipeline's answer covers the whole topic
        for key, value in self.client.items():
            reader = reader.option(f"kafka.{key}", value)
        return reader.option("maxOffsetsPerTrigger", self.params["per-trigger"]).load()

    def raw_records(self, topics: str) -> DataFrame:
        """Every record of `topics` (comma-separated) as the Kafka source's columns, unchecked:
        for sinks that judge (and count) bad input themselves. Counted as input."""
        return progress.observe_input(self._read(topics), topics, F.lit(False))

    def records(self, shapes: dict[str, dead_letter.Shape]) -> DataFrame:
        """The good records of the topics in `shapes`; the bad ones are counted and kept
        for the dead-letter topic (see `start`)."""
        topics = ",".join(shapes)
        records = self._read(topics)
        # Two branches of one query, each scanning the micro-batch: only one observes it.
        checked = dead_letter.checked(records, shapes)
        self.bad.append(dead_letter.bad_records(
            progress.observe_input(checked, topics, F.col(dead_letter.REASON).isNotNull())))
        return dead_letter.checked(records, shapes).where(F.col(dead_letter.REASON).isNull()).drop(dead_letter.REASON)

    def events(self, topic: str, schema: str) -> DataFrame:
        """A topic of JSON events as columns plus `event_time` (from ts_ms), each
        delivered once and at most `lateness` behind the newest."""
        records = self.records({self.params[topic]: dead_letter.Shape(dead_letter.fields(schema))})
        events = (records.select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
                  .withColumn("event_time", F.timestamp_millis("ts_ms")))
        return lateness.on_time(events, "event_time", self.params["lateness"])

    def start(self, name: str, frame: DataFrame, sink: Callable) -> StreamingQuery:
        """Run `frame` into `sink`, and the bad records of `records`' readers, if any, into
        the dead-letter topic (a pipeline of `raw_records` has none: its sink judges them)."""
        rows = progress.observe_output(frame)
        for bad in self.bad:
            rows = rows.unionByName(bad, allowMissingColumns=True)
        if self.bad:
            sink = dead_letter.WithDeadLetters(sink, dead_letter.DeadLetterTopic(self.client,
                                                                                 self.params["dead-letter"]))
        return (rows.writeStream.queryName(name).foreachBatch(sink)
                .option("checkpointLocation", str(self.checkpoint / name)).trigger(**self.trigger).start())


@dataclass(frozen=True)
class Pipeline:
    name: str
    summary: str
    params: dict[str, str]
    start: Callable[[Run], StreamingQuery]


def _windows(run: Run) -> StreamingQuery:
    events = run.events("events", "event_id string, user_id string, ts_ms long")
    counts = windows.tumbling_counts(events, "event_time", run.params["size"], ["user_id"])
    rows = counts.select(F.unix_millis("window_start").alias("start_ms"), "user_id", "events")
    return run.start("windows", rows, exactly_once.SqliteUpsert(run.output / "windows.db", "window_counts",
                                                                ["start_ms", "user_id"]))


def _click_through(run: Run) -> StreamingQuery:
    searches = run.events("searches", "event_id string, session_id string, term string, ts_ms long")
    clicks = run.events("clicks", "event_id string, session_id string, ts_ms long")
    outcomes = window_join.search_outcomes(searches.withColumnRenamed("event_id", "search_id"),
                                           clicks.withColumnRenamed("event_id", "click_id"), run.params["within"])
    return run.start("click-through", outcomes, exactly_once.ParquetPerBatch(run.output / "search_outcomes"))


def _revenue_view(run: Run) -> StreamingQuery:
    tables = run.records({run.params["orders"]: dead_letter.Shape(materialized_view.ORDER, changelog=True),
                          run.params["products"]: dead_letter.Shape(materialized_view.PRODUCT, changelog=True)})
    return run.start("revenue-view", tables, materialized_view.RevenueView(
        run.output / "view.db", run.params["orders"], run.params["products"]))


def _card_testing(run: Run) -> StreamingQuery:
    payments = run.events("payments", "event_id string, card_id string, status string, ts_ms long")
    matches = cep.failures_then_success(payments.withColumnRenamed("event_id", "payment_id"))
    alerts = matches.select("card_id", F.unix_millis("first_failure").alias("first_failure_ms"),
                            F.unix_millis("success_time").alias("success_ms"), "failures", "payment_id")
    return run.start("card-testing", alerts, exactly_once.TopicPerBatch(run.client, run.params["alerts"], "payment_id"))


def _percolator(run: Run) -> StreamingQuery:
    both = run.raw_records(f"{run.params['queries']},{run.params['documents']}")
    return run.start("percolator", both, standing_queries.Percolator(
        run.output / "percolator.db", run.client, run.params["queries"], run.params["matches"]))


def _search_index(run: Run) -> StreamingQuery:
    changes = run.raw_records(run.params["changes"])
    return run.start("search-index", changes, derived.SearchIndex(run.output / "search.db",
                                                                  run.params["fields"].split(",")))


def _cache(run: Run) -> StreamingQuery:
    changes = run.raw_records(run.params["changes"])
    return run.start("cache", changes, derived.Cache(run.output / "cache.db"))


PAGE_VIEW = "event_id string, user_id string, page string, latency_ms double, ts_ms long"


def _latency_stats(run: Run) -> StreamingQuery:
    p = run.params
    stats = analytics.window_stats(run.events("page-views", PAGE_VIEW), "event_time", p["size"], p["slide"],
                                   "latency_ms", "user_id", int(p["accuracy"]), float(p["rsd"]))
    rows = stats.select(F.unix_millis("window_start").alias("start_ms"), F.unix_millis("window_end").alias("end_ms"),
                        "events", "per_second", "mean", "p50", "p95", "p99",
                        F.col("distinct_keys").alias("distinct_users"))
    return run.start("latency-stats", rows, exactly_once.SqliteUpsert(run.output / "latency_stats.db",
                                                                      "latency_stats", ["start_ms"]))


def _top_pages(run: Run) -> StreamingQuery:
    counts = analytics.key_counts(run.events("page-views", PAGE_VIEW), "event_time", run.params["size"], "page")
    rows = counts.select(F.unix_millis("window_start").alias("start_ms"), "page", "events")
    sink = exactly_once.SqliteUpsert(run.output / "top_pages.db", "top_pages", ["start_ms", "rank"])
    return run.start("top-pages", rows, analytics.TopKeys(int(run.params["k"]), "start_ms", "page", sink))


def _device_clocks(run: Run) -> StreamingQuery:
    p = run.params
    readings = clocks.readings(run.records({p["readings"]: dead_letter.Shape(dead_letter.fields(clocks.READING))}))
    counted = clocks.corrected_windows(readings, clocks.interval_ms(p["size"]), clocks.interval_ms(p["lateness"]),
                                       p["delay"])
    return run.start("device-clocks", counted.withColumn("start_ms", F.unix_millis("window_start")),
                     exactly_once.ParquetPerBatch(run.output / "device_windows"))


# Defaults for a live stream: a micro-batch takes what arrived since the last one, up to
# `per-trigger` records (a backlog is read in batches of that size).
LIVE = {"per-trigger": "10000"}
EVENTS = {"lateness": "2 minutes", **LIVE}
PAGE_VIEWS = {"page-views": "page-views", "size": "1 minute", **EVENTS}


def _pipeline(name: str, summary: str, params: dict[str, str], start: Callable[[Run], StreamingQuery]) -> Pipeline:
    return Pipeline(name, summary, {**params, "dead-letter": f"{name}.dlq"}, start)


PIPELINES = {p.name: p for p in [
    _pipeline("windows", "events per user in tumbling windows of event time -> SQLite windows.db",
              {"events": "events", "size": "1 minute", **EVENTS}, _windows),
    _pipeline("click-through", "searches x clicks of a session within a bound (stream-stream join) -> Parquet "
              "search_outcomes/", {"searches": "searches", "clicks": "clicks", "within": "10 minutes", **EVENTS},
              _click_through),
    _pipeline("revenue-view", "orders x products changelogs (table-table join) as a view -> SQLite view.db",
              {"orders": "orders", "products": "products", **LIVE}, _revenue_view),
    _pipeline("card-testing", "3 failed payments then a success on a card within 10 minutes (CEP) -> topic",
              {"payments": "payments", "alerts": "payment-alerts", **EVENTS}, _card_testing),
    _pipeline("latency-stats", "page views per window of `size` every `slide`: rate, mean (a rolling average when "
              "slide < size), p50/p95/p99 latency (percentile_approx), distinct users (HyperLogLog) -> SQLite "
              "latency_stats.db", {**PAGE_VIEWS, "slide": "1 minute", "accuracy": str(analytics.ACCURACY),
                                   "rsd": str(analytics.RSD)}, _latency_stats),
    _pipeline("top-pages", "the k most viewed pages per tumbling window -> SQLite top_pages.db",
              {**PAGE_VIEWS, "k": "3"}, _top_pages),
    _pipeline("device-clocks", "device readings per window of clock-corrected event time, with corrections for "
              "stragglers and too-late counts -> Parquet device_windows/",
              {"readings": "device-readings", "size": "1 minute", "lateness": "3 minutes", "delay": "10 seconds",
               **LIVE}, _device_clocks),
    _pipeline("percolator", "documents matched against the standing queries of a compacted topic, as of each "
              "document's time -> topic keyed by query id", {"queries": "queries", "documents": "documents",
                                                            "matches": "matches", **LIVE}, _percolator),
    _pipeline("search-index", "a CDC topic's rows in a full-text index (SQLite FTS5), exactly once -> search.db",
              {"changes": "shop.main.products", "fields": "name", **LIVE}, _search_index),
    _pipeline("cache", "a CDC topic's rows in a key-value cache, exactly once -> SQLite cache.db",
              {"changes": "shop.main.products", **LIVE}, _cache),
]}
