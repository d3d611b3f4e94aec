"""The shipped pipelines, by name: each one reads Kafka topics and writes an exactly-once
sink, so `headwater pipelines run NAME` can start it with no driver script.

A pipeline is a function from a `Run` (the session, the broker's client settings, where
checkpoints and outputs go, the trigger, its parameters) to a started streaming query.
Its parameters (topic names, lateness, window sizes, records per micro-batch) have
defaults listed in `Pipeline.params` and are overridden with `--set name=value`.
Event topics hold JSON values with an `event_id` and a `ts_ms` (event time, epoch ms);
`reference` gives each pipeline's answer in plain Python.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from headwater.pipelines import (cep, derived, exactly_once, lateness, materialized_view, standing_queries,
                                 window_join, windows)


@dataclass
class Run:
    spark: SparkSession
    client: dict  # librdkafka settings: bootstrap.servers and any security properties
    checkpoint: Path  # each pipeline's checkpoint is a directory below, named after it
    output: Path  # SQLite databases and Parquet datasets go here
    trigger: dict  # keyword arguments of DataStreamWriter.trigger
    params: dict[str, str] = field(default_factory=dict)

    def records(self, topics: str, per_trigger: str | None = None) -> DataFrame:
        reader = self.spark.readStream.format("headwater").option("subscribe", topics)
        reader = reader.option("startingOffsets", "earliest")
        for key, value in self.client.items():
            reader = reader.option(f"kafka.{key}", value)
        if per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", per_trigger)
        return reader.load()

    def events(self, topic: str, schema: str) -> DataFrame:
        """A topic of JSON events as columns plus `event_time` (from ts_ms), each
        delivered once and at most `lateness` behind the newest."""
        events = (self.records(self.params[topic], self.params.get("per-trigger"))
                  .select(F.from_json(F.col("value").cast("string"), schema).alias("e")).select("e.*")
                  .withColumn("event_time", F.timestamp_millis("ts_ms")))
        return lateness.on_time(events, "event_time", self.params["lateness"])

    def start(self, name: str, frame: DataFrame, sink: Callable) -> StreamingQuery:
        return (frame.writeStream.queryName(name).foreachBatch(sink)
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
    tables = run.records(f"{run.params['orders']},{run.params['products']}")
    return run.start("revenue-view", tables, materialized_view.RevenueView(
        run.output / "view.db", run.params["orders"], run.params["products"]))


def _card_testing(run: Run) -> StreamingQuery:
    payments = run.events("payments", "event_id string, card_id string, status string, ts_ms long")
    matches = cep.failures_then_success(payments.withColumnRenamed("event_id", "payment_id"))
    alerts = matches.select("card_id", F.unix_millis("first_failure").alias("first_failure_ms"),
                            F.unix_millis("success_time").alias("success_ms"), "failures", "payment_id")
    return run.start("card-testing", alerts, exactly_once.TopicPerBatch(run.client, run.params["alerts"], "payment_id"))


def _percolator(run: Run) -> StreamingQuery:
    both = run.records(f"{run.params['queries']},{run.params['documents']}", run.params["per-trigger"])
    return run.start("percolator", both, standing_queries.Percolator(
        run.output / "percolator.db", run.client, run.params["queries"], run.params["matches"]))


def _search_index(run: Run) -> StreamingQuery:
    changes = run.records(run.params["changes"], run.params["per-trigger"])
    return run.start("search-index", changes, derived.SearchIndex(run.output / "search.db",
                                                                  run.params["fields"].split(",")))


def _cache(run: Run) -> StreamingQuery:
    changes = run.records(run.params["changes"], run.params["per-trigger"])
    return run.start("cache", changes, derived.Cache(run.output / "cache.db"))


EVENTS = {"lateness": "2 minutes", "per-trigger": "8"}
PIPELINES = {p.name: p for p in [
    Pipeline("windows", "events per user in tumbling windows of event time -> SQLite windows.db",
             {"events": "events", "size": "1 minute", **EVENTS}, _windows),
    Pipeline("click-through", "searches x clicks of a session within a bound (stream-stream join) -> Parquet "
             "search_outcomes/", {"searches": "searches", "clicks": "clicks", "within": "10 minutes", **EVENTS},
             _click_through),
    Pipeline("revenue-view", "orders x products changelogs (table-table join) as a view -> SQLite view.db",
             {"orders": "orders", "products": "products"}, _revenue_view),
    Pipeline("card-testing", "3 failed payments then a success on a card within 10 minutes (CEP) -> topic",
             {"payments": "payments", "alerts": "payment-alerts", **EVENTS}, _card_testing),
    Pipeline("percolator", "documents matched against the standing queries of a compacted topic, as of each "
             "document's time -> topic keyed by query id", {"queries": "queries", "documents": "documents",
                                                           "matches": "matches", "per-trigger": "10000"}, _percolator),
    Pipeline("search-index", "a CDC topic's rows in a full-text index (SQLite FTS5), exactly once -> search.db",
             {"changes": "shop.main.products", "fields": "name", "per-trigger": "10000"}, _search_index),
    Pipeline("cache", "a CDC topic's rows in a key-value cache, exactly once -> SQLite cache.db",
             {"changes": "shop.main.products", "per-trigger": "10000"}, _cache),
]}
