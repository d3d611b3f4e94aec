"""Stream analytics on event time: tumbling, hopping and session windows.

Each function takes a stream of events that went through `lateness.on_time` (so it
carries a watermark) and counts events per key and window. In append mode a window is
emitted once, when the watermark passes its end: late events inside the allowed
lateness are in the count, later ones were dropped and counted by `on_time`.
Sliding windows (one per event) live in `sliding`.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def _counts(events: DataFrame, window, keys) -> DataFrame:
    return (events.groupBy(window.alias("window"), *keys)
            .agg(F.count(F.lit(1)).alias("events"))
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                    *keys, "events"))


def tumbling_counts(events: DataFrame, time_col: str, size: str, keys=()) -> DataFrame:
    """Events per key in fixed windows that do not overlap (e.g. size "1 minute"):
    every event is in exactly one window."""
    return _counts(events, F.window(time_col, size), list(keys))


def hopping_counts(events: DataFrame, time_col: str, size: str, slide: str, keys=()) -> DataFrame:
    """Events per key in fixed windows of `size` starting every `slide` (e.g. 5 minutes
    every minute): each event is in size/slide windows."""
    return _counts(events, F.window(time_col, size, slide), list(keys))


def session_counts(events: DataFrame, time_col: str, gap: str, keys=("user_id",)) -> DataFrame:
    """Events per user session: a session ends when the user is inactive for `gap`
    (its end is the last event time plus the gap)."""
    return _counts(events, F.session_window(time_col, gap), list(keys))
