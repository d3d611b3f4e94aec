"""Sliding windows: for every event, how many events of its key lie within `size` before it.

Unlike tumbling and hopping windows a sliding window has no fixed boundaries: events at
10:03:39 and 10:08:12 share a 5-minute sliding window. It is kept as DDIA describes, a
buffer of recent event times per key from which times older than the window expire.
An event's count is emitted when the watermark passes it, so it includes every
on-time event in (t - size, t], late ones too.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from headwater.pipelines.event_order import EventTimeOrdered, to_timestamp

OUTPUT = "key string, event_id string, event_time timestamp, events_in_window long"


class SlidingCount(EventTimeOrdered):
    event_schema = "event_id string, event_ms long"
    order_fields = ("event_ms", "event_id")

    def __init__(self, size_ms: int):
        self.size_ms = size_ms

    def setup(self, handle) -> None:
        self.recent = handle.getListState("recent", "event_ms long")

    def on_events(self, key, events, watermark_ms) -> Iterator[Row]:
        times = sorted([t for (t,) in (self.recent.get() if self.recent.exists() else ())]
                       + [e.event_ms for e in events])
        for e in events:
            count = sum(1 for t in times if e.event_ms - self.size_ms < t <= e.event_ms)
            yield Row(key=key[0], event_id=e.event_id, event_time=to_timestamp(e.event_ms), events_in_window=count)
        # Later events are newer than the watermark, so older times can no longer count.
        keep = [(t,) for t in times if t > watermark_ms - self.size_ms]
        if keep:
            self.recent.put(keep)
        else:
            self.recent.clear()


def sliding_counts(events: DataFrame, time_col: str, size_ms: int, key_col: str, id_col: str = "event_id") -> DataFrame:
    """One row per event: its key, id, time and the number of events of the same key
    in the `size_ms` milliseconds up to and including its time. `events` must come
    from `lateness.on_time`."""
    prepared = events.select(F.col(key_col).cast("string").alias("key"), F.col(id_col).alias("event_id"),
                             F.unix_millis(time_col).alias("event_ms"))
    return prepared.groupBy("key").transformWithState(
        SlidingCount(size_ms), OUTPUT, "Append", "EventTime")
