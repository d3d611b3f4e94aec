"""Replaying a keyed stream in event-time order, for processors that must see order.

Events arrive out of order. A processor that must see them in event-time order
(a pattern, a per-event window, an as-of join) holds each event in keyed state until
the watermark passes it; then no earlier event can still arrive (earlier ones are
dropped upstream by `lateness.on_time`), and the held events are handed to
`on_event` sorted by (time, tie-breaker). An event-time timer at each event's time
wakes the key up. The price is latency: results follow the watermark.
"""

from __future__ import annotations

import datetime
from typing import Iterator

from pyspark.sql import Row
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle


class EventTimeOrdered(StatefulProcessor):
    """Subclasses set `event_schema` (DDL of the buffered input rows), `time_field`
    (epoch milliseconds, long) and `order_fields`, and implement `on_event`."""

    event_schema: str
    time_field: str = "event_ms"
    order_fields: tuple[str, ...] = ("event_ms",)

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.held = handle.getListState("held", self.event_schema)
        self.field_names = [f.strip().split()[0] for f in self.event_schema.split(",")]
        self.setup(handle)

    def setup(self, handle: StatefulProcessorHandle) -> None:
        """Declare the subclass's own state here."""

    def on_events(self, key, events: list[Row], watermark_ms: int) -> Iterator[Row]:
        """The events the watermark has passed since the last call, in order."""
        for event in events:
            yield from self.on_event(key, event, watermark_ms)

    def on_event(self, key, event: Row, watermark_ms: int) -> Iterator[Row]:
        raise NotImplementedError

    def on_timer(self, key, expiry_ms: int, watermark_ms: int) -> Iterator[Row]:
        """Any timer fired (after the due events were handed over); for timers the
        subclass registered itself, e.g. to expire state."""
        return iter(())

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        for row in rows:
            event = tuple(row[name] for name in self.field_names)
            self.held.appendValue(event)
            self.handle.registerTimer(row[self.time_field])
        return iter(())

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        watermark = timerValues.getCurrentWatermarkInMs()
        time_index = self.field_names.index(self.time_field)
        due, later = [], []
        for event in (self.held.get() if self.held.exists() else ()):
            (due if event[time_index] <= watermark else later).append(event)
        if due:
            if later:
                self.held.put(later)
            else:
                self.held.clear()
            order = [self.field_names.index(f) for f in self.order_fields]
            events = [Row(**dict(zip(self.field_names, e))) for e in sorted(due, key=lambda e: [e[i] for i in order])]
            yield from self.on_events(key, events, watermark)
        yield from self.on_timer(key, expiredTimerInfo.getExpiryTimeInMs(), watermark)


def to_timestamp(ms: int) -> datetime.datetime:
    """Epoch milliseconds as the UTC datetime Spark expects for a timestamp column."""
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
