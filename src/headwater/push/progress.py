"""Which offsets a push subscription may commit: only past records that are finished.

Records finish out of order (parallel deliveries, retries); the committed offset of a
partition moves only over a prefix of finished records, so a crash redelivers what was
unfinished and never skips it. Offsets are taken in the order the consumer gave them,
so gaps in the log (compaction, transaction markers) need no special case.
"""
from __future__ import annotations

import threading
from collections import OrderedDict


class Progress:
    """Thread-safe: the consumer's rebalance callbacks run on its own thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (topic, partition) -> offset -> finished?, in the order taken
        self._pending: dict[tuple[str, int], OrderedDict[int, bool]] = {}
        self._committable: dict[tuple[str, int], int] = {}  # next offset to consume, not yet committed

    def taken(self, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            self._pending.setdefault((topic, partition), OrderedDict())[offset] = False

    def finished(self, topic: str, partition: int, *offsets: int) -> None:
        """These records (one, or a batch's) are acknowledged or dead-lettered."""
        with self._lock:
            pending = self._pending.get((topic, partition))
            if pending is None:
                return  # the partition was revoked meanwhile: its new owner redelivers
            for offset in offsets:
                if offset in pending:  # else revoked meanwhile, as above
                    pending[offset] = True
            while pending and next(iter(pending.values())):
                done, _ = pending.popitem(last=False)
                self._committable[(topic, partition)] = done + 1

    def outstanding(self) -> int:
        with self._lock:
            return sum(1 for p in self._pending.values() for done in p.values() if not done)

    def take_commits(self, partitions: set[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Offsets to commit now (all partitions, or these), forgotten once returned."""
        with self._lock:
            chosen = {tp: o for tp, o in self._committable.items() if partitions is None or tp in partitions}
            for tp in chosen:
                del self._committable[tp]
            return chosen

    def forget(self, partitions: set[tuple[str, int]]) -> None:
        with self._lock:
            for tp in partitions:
                self._pending.pop(tp, None)
                self._committable.pop(tp, None)
