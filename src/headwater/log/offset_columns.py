"""A topic's partition offsets as columns: every partition's log end, log start and first
unstable offset in one numpy array each, written by the logs themselves as the offsets move.

librdkafka's fetch names every partition of a topic, each time; comparing each fetch offset
with its log's end one ``Log`` object at a time cost ~0.1 µs a partition for each of the three
offsets (1,000 partitions: ~130 µs a fetch). Read as columns it is one array operation.

Each ``Log`` writes its own slot as its offset changes, under its lock, so no reader
ever sees an offset the log no longer has (tests/log/test_offset_columns.py checks every way an
offset moves). ``attach`` re-sizes the columns when a topic gains partitions; each log then
writes its slot again under its lock, so a write that raced the re-size is not lost.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

NO_UNSTABLE = -1   # the first unstable offset's column where no transaction is open


class Log(Protocol):   # partition.Log, which imports this module
    def publish_offsets(self, columns: OffsetColumns, slot: int) -> None: ...


class OffsetColumns:
    __slots__ = ("logs", "end", "start", "unstable")

    def __init__(self) -> None:
        self.logs: list[Log] = []   # the list attached last: a reader checks it is the topic's own
        self.end = self.start = self.unstable = np.zeros(0, np.int64)

    def attach(self, logs: list[Log]) -> None:
        """Columns for ``logs`` (a topic's partitions, in order), each log writing its slot."""
        self.end, self.start, self.unstable = (np.zeros(len(logs), np.int64) for _ in range(3))
        for slot, log in enumerate(logs):
            log.publish_offsets(self, slot)
        self.logs = logs
