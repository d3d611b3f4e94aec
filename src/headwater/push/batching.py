"""Which records a batched push subscription sends together: records of one partition, in the
order taken, until the batch holds `size` records or its first record has waited `wait` seconds
(like a producer's batch.size and linger.ms). One partition per batch, so a batch finishes a
contiguous run of that partition's records and its progress is committed as one step.
"""
from __future__ import annotations

import time
from collections.abc import Callable

from headwater.push.envelope import Record


class OpenBatches:
    """Records taken but not yet sent, per partition. The clock is an argument so tests step it."""

    def __init__(self, size: int, wait: float, clock: Callable[[], float] = time.monotonic):
        self.size = size
        self.wait = wait
        self._clock = clock
        self._open: dict[tuple[str, int], list[Record]] = {}
        self._due: dict[tuple[str, int], float] = {}  # when each open batch must go, full or not

    def add(self, record: Record) -> list[Record] | None:
        """Take a record; the batch it completes, if it does."""
        where = (record.topic, record.partition)
        batch = self._open.get(where)
        if batch is None:
            batch = self._open[where] = []
            self._due[where] = self._clock() + self.wait
        batch.append(record)
        return self._close(where) if len(batch) >= self.size else None

    def due(self) -> list[list[Record]]:
        """Batches that waited long enough, oldest first."""
        now = self._clock()
        return [self._close(where) for where, at in sorted(self._due.items(), key=lambda item: item[1]) if at <= now]

    def seconds_to_next(self) -> float | None:
        """How long until the next open batch is due (None: nothing open)."""
        return max(0.0, min(self._due.values()) - self._clock()) if self._due else None

    def drop(self, partitions: set[tuple[str, int]]) -> None:
        """Revoked partitions: their unsent records are delivered again by the new owner."""
        for where in partitions:
            self._open.pop(where, None)
            self._due.pop(where, None)

    def _close(self, where: tuple[str, int]) -> list[Record]:
        del self._due[where]
        return self._open.pop(where)
