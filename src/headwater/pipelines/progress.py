"""What a running pipeline did, one line per micro-batch, as it happens.

Spark's own counters do not answer an operator's questions here: `numInputRows` counts
a source once per scan, and a pipeline with a dead-letter output scans its input twice
(see `dead_letter`). So a pipeline observes its input records (all, and the bad ones)
and its output rows itself (`Dataset.observe`, whose totals Spark reports with each
micro-batch), and a line adds the watermark in force and the events the watermark
dropped as too late (`lateness`). Lines are `name=value` pairs, for grep and scripts:

    pipeline=windows batch=3 rows_in=12 rows_out=4 watermark=2023-11-14T22:20:00.000Z too_late=1 dead_letters=2
"""
from __future__ import annotations

import time
from typing import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from headwater.pipelines.lateness import too_late

INPUT = "input:"  # observations of input records start with this, one per reader
OUTPUT = "output"
NO_WATERMARK = "1970-01-01T00:00:00.000Z"  # what Spark reports before the first one
POLL_S = 0.5


def observe_input(records: DataFrame, name: str, bad: Column) -> DataFrame:
    return records.observe(INPUT + name, F.count(F.lit(1)).alias("rows"), F.count_if(bad).alias("bad"))


def observe_output(rows: DataFrame) -> DataFrame:
    return rows.observe(OUTPUT, F.count(F.lit(1)).alias("rows"))


def line(progress: StreamingQueryProgress) -> str:
    metrics = progress.observedMetrics
    inputs = [m for name, m in metrics.items() if name.startswith(INPUT)]
    watermark = progress.eventTime.get("watermark", NO_WATERMARK)
    return (f"pipeline={progress.name} batch={progress.batchId} rows_in={sum(m.rows for m in inputs)} "
            f"rows_out={metrics[OUTPUT].rows if OUTPUT in metrics else 0} "
            f"watermark={'none' if watermark == NO_WATERMARK else watermark} too_late={too_late(progress)} "
            f"dead_letters={sum(m.bad for m in inputs)}")


def follow(queries: list[StreamingQuery], write: Callable[[str], None]) -> None:
    """Write a line per micro-batch of the queries until one of them stops; raise its
    error if it failed."""
    shown = {q.id: -1 for q in queries}
    while True:
        stopped = [q for q in queries if not q.isActive]
        for q in queries:  # a stopped query's last batches are in its progress too
            for progress in q.recentProgress:
                if progress.batchId > shown[q.id]:
                    write(line(progress))
                    shown[q.id] = progress.batchId
        if stopped:
            stopped[0].awaitTermination()  # raises the query's error, if any
            return
        time.sleep(POLL_S)
