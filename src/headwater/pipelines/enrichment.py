"""Stream-table join (enrichment): each click joined with its user's profile as it was
at the time of the click.

The table arrives as a changelog (see `changelog`), so the processor keeps its own
copy of the table, per user, the way DDIA describes: a profile change updates the
local copy, a click reads it. Clicks and changes of a user are replayed in event-time
order (`event_order`), a change at the same instant as a click first, so a click sees
exactly the changes made up to its time — not the table as it is when the click
happens to be processed.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from headwater.pipelines.event_order import EventTimeOrdered, to_timestamp
from headwater.pipelines.lateness import on_time

OUTPUT = "click_id string, user_id string, click_time timestamp, profile string"
CHANGE, CLICK = 0, 1


class ProfileAsOf(EventTimeOrdered):
    event_schema = "event_ms long, kind int, seq long, click_id string, profile string"
    order_fields = ("event_ms", "kind", "seq")

    def setup(self, handle) -> None:
        self.profile = handle.getValueState("profile", "json string")

    def on_event(self, key, event: Row, watermark_ms: int) -> Iterator[Row]:
        if event.kind == CHANGE:
            if event.profile is None:
                self.profile.clear()
            else:
                self.profile.update((event.profile,))
            return
        current = self.profile.get() if self.profile.exists() else None
        yield Row(click_id=event.click_id, user_id=key[0], click_time=to_timestamp(event.event_ms),
                  profile=current[0] if current else None)


def enrich_clicks(clicks: DataFrame, profile_changes: DataFrame, lateness: str = "5 minutes") -> DataFrame:
    """clicks: user_id, click_id, event_time; profile_changes: `changelog.changes` of
    the profile topic. Returns click_id, user_id, click_time and the profile JSON in
    force at click time (null if the user had none, or had been deleted).

    Both streams share one watermark, set after their union: a table whose changelog
    is quiet must not hold the clicks back. A change older than the watermark is
    dropped (and counted) like a too-late click; the first micro-batch, which reads
    the compacted topic from its beginning, runs before any watermark exists."""
    click_rows = clicks.select(
        F.col("user_id").cast("string"), F.col("event_time"), F.lit(CLICK).alias("kind"),
        F.concat(F.lit("click:"), F.col("click_id")).alias("event_id"),
        F.lit(0).cast("long").alias("seq"), F.col("click_id").cast("string"), F.lit(None).cast("string").alias("profile"))
    change_rows = profile_changes.select(
        F.col("id").alias("user_id"), F.col("change_time").alias("event_time"), F.lit(CHANGE).alias("kind"),
        F.concat_ws(":", F.lit("change"), "topic", "partition", "offset").alias("event_id"),
        F.col("offset").alias("seq"), F.lit(None).cast("string").alias("click_id"),
        F.when(F.col("deleted"), None).otherwise(F.to_json("row")).alias("profile"))
    both = on_time(click_rows.unionByName(change_rows), "event_time", lateness)
    both = both.withColumn("event_ms", F.unix_millis("event_time"))
    return both.groupBy("user_id").transformWithState(ProfileAsOf(), OUTPUT, "Append", "EventTime")
