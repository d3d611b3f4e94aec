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
`admitted` is the same rule in plain Python: the yardstick of the tests and the demo.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

DEDUPE_OPERATOR = "dedupeWithinWatermark"


def on_time(events: DataFrame, time_col: str, lateness: str, id_cols=("event_id",)) -> DataFrame:
    """Events at most `lateness` (e.g. "5 minutes") behind the latest event time seen,
    each delivered once (by `id_cols`)."""
    return events.withWatermark(time_col, lateness).dropDuplicatesWithinWatermark(list(id_cols))


def watermark_report(query: StreamingQuery) -> list[dict]:
    """Per micro-batch: the watermark in force, rows read, and too-late rows dropped."""
    report = []
    for progress in query.recentProgress:
        dropped = sum(op.numRowsDroppedByWatermark for op in progress.stateOperators
                      if op.operatorName == DEDUPE_OPERATOR)
        report.append({"batch": progress.batchId, "watermark": progress.eventTime.get("watermark"),
                       "rows": progress.numInputRows, "dropped_too_late": dropped})
    return report


def dropped_events(query: StreamingQuery) -> int:
    """Events dropped so far for arriving after the watermark had passed them
    (within the query's recent progress, by default its last 100 micro-batches)."""
    return sum(batch["dropped_too_late"] for batch in watermark_report(query))


def micro_batches(events: list, per_trigger: int) -> list[list]:
    """The micro-batches a query reads a one-partition topic in, with
    maxOffsetsPerTrigger = per_trigger (what `admitted` needs as its input)."""
    return [events[i:i + per_trigger] for i in range(0, len(events), per_trigger)]


def admitted(batches: list[list[dict]], lateness_ms: int, time_field: str = "ts_ms", id_field: str = "event_id"):
    """The rule `on_time` applies, in plain Python, to check a pipeline's answers:
    which events (dicts, in micro-batches as the query reads them) survive the
    watermark, how many are dropped as too late, and the final watermark.

    Spark's watermark after a batch is the largest event time seen minus the
    lateness; with a chain of stateful operators an event is dropped when its time is
    at or before the watermark of the *previous* batch (late-event watermark).
    Returns (kept events, dropped count, final watermark in ms).
    """
    kept, dropped, seen = [], 0, set()
    max_seen = None
    watermarks = [0]  # watermark in force for batch i (0 = none yet)
    for i, batch in enumerate(batches):
        late_watermark = watermarks[i - 1] if i >= 1 else 0
        for event in batch:
            if i >= 1 and late_watermark > 0 and event[time_field] <= late_watermark:
                dropped += 1
            elif event[id_field] not in seen:  # a repeated delivery is not counted twice
                seen.add(event[id_field])
                kept.append(event)
        times = [e[time_field] for e in batch]
        if times:
            max_seen = max([max_seen or times[0]] + times)
        watermarks.append(max(watermarks[-1], max_seen - lateness_ms) if max_seen is not None else 0)
    final_watermark = max_seen - lateness_ms  # what the last (no-data) batch runs with
    return kept, dropped, final_watermark
