"""Complex event processing: a pattern over a keyed stream.

The pattern (card testing fraud): at least three failed payments on the same card,
followed by a successful one, all within 10 minutes. A success ends the run of
failures whether it completes the pattern or not. One complex event is emitted per
match. Payments are handled in event-time order (`event_order`), so the answer does
not depend on arrival order; a timer at the last failure plus the window expires the
run of failures on cards that go quiet, so their state does not linger.
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from headwater.pipelines.event_order import EventTimeOrdered, to_timestamp

OUTPUT = "card_id string, first_failure timestamp, success_time timestamp, failures int, payment_id string"
WINDOW_MS = 10 * 60 * 1000
FAILURES = 3


class FailuresThenSuccess(EventTimeOrdered):
    event_schema = "payment_id string, event_ms long, succeeded boolean"
    order_fields = ("event_ms", "payment_id")

    def __init__(self, window_ms: int = WINDOW_MS, failures: int = FAILURES):
        self.window_ms, self.failures = window_ms, failures

    def setup(self, handle) -> None:
        self.failed = handle.getListState("failed", "event_ms long")

    def on_events(self, key, events, watermark_ms) -> Iterator[Row]:
        failed = [t for (t,) in (self.failed.get() if self.failed.exists() else ())]
        for e in events:
            recent = [t for t in failed if t >= e.event_ms - self.window_ms]
            if not e.succeeded:
                failed = recent + [e.event_ms]
                continue
            if len(recent) >= self.failures:
                yield Row(card_id=key[0], first_failure=to_timestamp(recent[0]),
                          success_time=to_timestamp(e.event_ms), failures=len(recent), payment_id=e.payment_id)
            failed = []
        if failed:
            self.failed.put([(t,) for t in failed])
            self.handle.registerTimer(failed[-1] + self.window_ms)
        else:
            self.failed.clear()

    def on_timer(self, key, expiry_ms, watermark_ms) -> Iterator[Row]:
        # The run of failures is too old to complete the pattern: forget it.
        if self.failed.exists():
            last = max(t for (t,) in self.failed.get())
            if last + self.window_ms <= watermark_ms:
                self.failed.clear()
        return iter(())


def failures_then_success(payments: DataFrame, time_col: str = "event_time") -> DataFrame:
    """Complex events from payments (card_id, payment_id, event_time, status
    "failed"/"succeeded") that went through `lateness.on_time`."""
    prepared = payments.select(F.col("card_id").cast("string"), "payment_id",
                               F.unix_millis(time_col).alias("event_ms"),
                               (F.col("status") == "succeeded").alias("succeeded"))
    return prepared.groupBy("card_id").transformWithState(FailuresThenSuccess(), OUTPUT, "Append", "EventTime")
