"""Late events: which ones still count, and how many were dropped.

Event time runs behind processing time, so a stream processor never knows it has seen
every event of a window. A watermark ("no event older than T is expected any more")
decides: an event older than the watermark is dropped, one newer than the watermark
but older than events already seen is late and still counted.

`on_time` is the one place the pipelines drop events. It also drops repeated
deliveries of the same event (an at-least-once producer may send one twice), and
Spark's counter of rows this operator dropped for being older than the watermark
(`numRowsDroppedByWatermark`) is then exactly the number of too-late events:
`dropped_events(query)` surfaces it. (Downstream window operators cannot drop an
event that passed here: a window ends after every event it holds.)
`reference.admitted` is the same rule in plain Python: the yardstick of the tests and the demo.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

DEDUPE_OPERATOR = "dedupeWithinWatermark"


def on_time(events: DataFrame, time_col: str, lateness: str, id_cols=("event_id",)) -> DataFrame:
    """Events at most `lateness` (e.g. "5 minutes") behind the latest event time seen,
    each delivered once (by `id_cols`)."""
    return events.withWatermark(time_col, lateness).dropDuplicatesWithinWatermark(list(id_cols))


def too_late(progress: StreamingQueryProgress) -> int:
    """Events one micro-batch dropped for arriving after the watermark had passed them."""
    return sum(op.numRowsDroppedByWatermark for op in progress.stateOperators if op.operatorName == DEDUPE_OPERATOR)


def watermark_report(query: StreamingQuery) -> list[dict]:
    """Per micro-batch: the watermark in force, rows read, and too-late rows dropped."""
    return [{"batch": progress.batchId, "watermark": progress.eventTime.get("watermark"),
             "rows": progress.numInputRows, "dropped_too_late": too_late(progress)}
            for progress in query.recentProgress]


def dropped_events(query: StreamingQuery) -> int:
    """Events dropped so far for arriving after the watermark had passed them
    (within the query's recent progress, by default its last 100 micro-batches)."""
    return sum(batch["dropped_too_late"] for batch in watermark_report(query))
