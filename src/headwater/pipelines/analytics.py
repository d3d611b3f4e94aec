"""Stream analytics per window of event time: rates, rolling averages, latency
percentiles, distinct users, and the top keys.

Percentiles and distinct counts are the approximate, mergeable summaries DDIA names,
as Spark ships them, each with the bound it promises:

- `percentile_approx(latency, p, accuracy)` (a Greenwald-Khanna summary) returns one of
  the window's values whose rank in the sorted values lies within n/accuracy of p*n;
- `approx_count_distinct(user, rsd)` (HyperLogLog++) has a relative standard deviation
  of `rsd`: we hold it to 3*rsd of the exact count. That is a 3-sigma bound, not a
  guarantee; Spark's hash is fixed, so a given input always gets the same estimate.

A window of `size` every `slide` with slide < size is a rolling (hopping) aggregate:
its `mean` is the rolling average. Windows are emitted once, when the watermark passes
their end (append mode). Ranking cannot run inside a streaming aggregation, so the top
keys are counted per (window, key) there, and ranked by `TopKeys` in foreachBatch: all
keys of a window close at the same watermark, hence arrive in the same micro-batch, and
the ranking is exact.
"""
from __future__ import annotations

from typing import Callable

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from headwater.pipelines import windows

PERCENTILES = (0.5, 0.95, 0.99)
ACCURACY = 100  # relative rank error 1/ACCURACY
RSD = 0.05  # approx_count_distinct's default relative standard deviation


def window_stats(events: DataFrame, time_col: str, size: str, slide: str, value_col: str, key_col: str,
                 accuracy: int = ACCURACY, rsd: float = RSD) -> DataFrame:
    """Per window: events, events per second, mean of `value_col`, its p50/p95/p99
    (approximate), and distinct `key_col` values (approximate). `events` must come
    from `lateness.on_time`."""
    stats = events.groupBy(F.window(time_col, size, slide).alias("window")).agg(
        F.count(F.lit(1)).alias("events"), F.avg(value_col).alias("mean"),
        F.percentile_approx(value_col, list(PERCENTILES), accuracy).alias("percentiles"),
        F.approx_count_distinct(key_col, rsd).alias("distinct_keys"))
    seconds = (F.unix_millis("window.end") - F.unix_millis("window.start")) / 1000
    return stats.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                        "events", (F.col("events") / seconds).alias("per_second"), "mean",
                        *(F.col("percentiles")[i].alias(f"p{round(p * 100)}") for i, p in enumerate(PERCENTILES)),
                        "distinct_keys")


def key_counts(events: DataFrame, time_col: str, size: str, key_col: str) -> DataFrame:
    """Events per key in tumbling windows, for `TopKeys`."""
    return windows.tumbling_counts(events, time_col, size, [key_col])


class TopKeys:
    """A foreachBatch function over `key_counts` (its window start in `window_col`):
    the `k` keys with most events in each window (ties broken by key), with their
    rank, handed to `sink`."""

    def __init__(self, k: int, window_col: str, key_col: str, sink: Callable[[DataFrame, int], None]):
        self.k, self.window_col, self.key_col, self.sink = k, window_col, key_col, sink

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        order = Window.partitionBy(self.window_col).orderBy(F.desc("events"), self.key_col)
        top = batch.withColumn("rank", F.row_number().over(order)).where(F.col("rank") <= self.k)
        self.sink(top, batch_id)
