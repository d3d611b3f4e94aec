"""The three clocks of an event, and stragglers that arrive after their window emitted.

A device stamps an event with its own clock twice: when it happened (`event_ms`) and
when it sent it (`sent_ms`); the broker stamps the record when it receives it (the
record timestamp, `received`: set by the producer, or by the broker on a topic with
message.timestamp.type=LogAppendTime). A device's clock may be off by minutes. For one
event received - sent = network delay - skew, so the smallest such difference seen
from a device is the best estimate of its offset: it is off by that event's delay
only, while a median would carry the typical queueing delay. Corrected event time =
event_ms + offset, on the broker's clock, off by at most one network delay.

Events per device are counted in tumbling windows of corrected time. The watermark is
on the broker's clock (`received` minus a delay): the one clock all devices share. A
window's result is published when the watermark passes its end (revision 0). An event
for a window already published (a device that was offline, sending late) publishes a
correction with the next revision, as long as the window ended at most `lateness`
before the watermark; after that its state is gone and the event is too late: it is
counted, per window, in a `too-late` row. `reference.corrected_windows` is the same
rule in plain Python. Within a micro-batch, the offset is estimated from all of a
device's events in it before any is corrected, so the answer does not depend on the
order rows reach the processor.
"""
from __future__ import annotations

from collections import Counter
from typing import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from headwater.pipelines.event_order import to_timestamp

READING = "event_id string, device_id string, event_ms long, sent_ms long"
OUTPUT = "device_id string, window_start timestamp, kind string, events long, revision int, offset_ms long"
RESULT, CORRECTION, TOO_LATE = "result", "correction", "too-late"
UNPUBLISHED = -1  # the revision of a window not published yet


_UNITS_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000}


def interval_ms(text: str) -> int:
    """An interval as Spark writes it ("3 minutes", "10 seconds") in milliseconds."""
    number, unit = text.split()
    return int(float(number) * _UNITS_MS[unit.removesuffix("s")])


def readings(records: DataFrame) -> DataFrame:
    """The `headwater` source's records of device events as columns, with the record
    timestamp as `received`."""
    return (records.select(F.from_json(F.col("value").cast("string"), READING).alias("e"),
                           F.col("timestamp").alias("received")).select("e.*", "received"))


class CorrectedWindows(StatefulProcessor):
    """Keyed by device: its offset estimate, and its windows (events, revision) until
    they are `lateness` behind the watermark."""

    def __init__(self, size_ms: int, lateness_ms: int):
        self.size_ms, self.lateness_ms = size_ms, lateness_ms

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.offset = handle.getValueState("offset", "offset_ms long")
        self.windows = handle.getMapState("windows", "start_ms long", "events long, revision int")

    def _row(self, device: str, start: int, kind: str, events: int, revision: int | None, offset: int) -> Row:
        return Row(device_id=device, window_start=to_timestamp(start), kind=kind, events=events, revision=revision,
                   offset_ms=offset)

    def _publish(self, device: str, start: int, offset: int) -> Row:
        events, revision = self.windows.getValue((start,))
        self.windows.updateValue((start,), (events, revision + 1))
        return self._row(device, start, RESULT if revision == UNPUBLISHED else CORRECTION, events, revision + 1,
                         offset)

    def handleInputRows(self, key, rows, timerValues) -> Iterator[Row]:
        device, rows = key[0], list(rows)
        watermark = timerValues.getCurrentWatermarkInMs()
        offset = min(r.received_ms - r.sent_ms for r in rows)
        if self.offset.exists():
            offset = min(offset, self.offset.get()[0])
        self.offset.update((offset,))
        too_late, touched = Counter(), set()
        for r in rows:
            start = (r.event_ms + offset) // self.size_ms * self.size_ms
            end = start + self.size_ms
            if end + self.lateness_ms <= watermark:
                too_late[start] += 1
                continue
            if self.windows.containsKey((start,)):
                events, revision = self.windows.getValue((start,))
            else:
                events, revision = 0, UNPUBLISHED
                if end > watermark:  # else it is published below
                    self.handle.registerTimer(end)
                self.handle.registerTimer(end + self.lateness_ms)
            self.windows.updateValue((start,), (events + 1, revision))
            touched.add(start)
        for start, n in sorted(too_late.items()):
            yield self._row(device, start, TOO_LATE, n, None, offset)
        for start in sorted(touched):
            if start + self.size_ms <= watermark:  # published before, or due now: publish (again)
                yield self._publish(device, start, offset)

    def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Row]:
        watermark = timerValues.getCurrentWatermarkInMs()
        offset = self.offset.get()[0]
        for (start,), (_, revision) in list(self.windows.iterator()):
            if revision == UNPUBLISHED and start + self.size_ms <= watermark:
                yield self._publish(key[0], start, offset)
            if start + self.size_ms + self.lateness_ms <= watermark:
                self.windows.removeKey((start,))


def corrected_windows(readings: DataFrame, size_ms: int, lateness_ms: int, delay: str) -> DataFrame:
    """Window results, corrections and too-late counts (see the module) from `readings`;
    the watermark is `delay` (e.g. "10 seconds") behind the newest receive time."""
    prepared = readings.withWatermark("received", delay).select(
        "device_id", "event_ms", "sent_ms", F.unix_millis("received").alias("received_ms"))
    return prepared.groupBy("device_id").transformWithState(
        CorrectedWindows(size_ms, lateness_ms), OUTPUT, "Append", "EventTime")
