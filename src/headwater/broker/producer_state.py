"""Idempotent producers: producer ids, epochs, and per-partition sequence numbers.

For each (producer id, partition) the broker remembers the last five batches it appended
(librdkafka and the Java client keep at most five in flight). A retried batch that matches
one of them is answered with its original base offset instead of being appended twice; a
batch that skips ahead is refused with OUT_OF_ORDER_SEQUENCE_NUMBER.

A partition's producer state is written to a snapshot in its directory at every segment
roll and when the broker stops, with the log end offset it covers, as Kafka does: the next
start (after a crash too) loads it and replays only the batches after it, so an idle
producer that outlived its segment is still known.
"""
from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from headwater.log.layout import PRODUCER_ID_BLOCK, PRODUCER_SNAPSHOT, replace_atomically
from headwater.protocol.errors import ErrorCode
from headwater.records import BatchHeader

CACHED_BATCHES = 5
ID_BLOCK = 1000  # producer ids are reserved on disk a block at a time


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    first_sequence: int
    last_sequence: int
    base_offset: int
    max_timestamp: int = -1


class Duplicate(Exception):
    def __init__(self, base_offset: int):
        self.base_offset = base_offset


class ProducerIds:
    """Hands out producer ids that stay unique across restarts (a reserved block is never reused)."""

    def __init__(self, data_dir: Path):
        self._path = data_dir / PRODUCER_ID_BLOCK
        start = int(self._path.read_text()) if self._path.exists() else 0
        self._next, self._limit = start, start

    def allocate(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + ID_BLOCK
            replace_atomically(self._path, str(self._limit))
        self._next += 1
        return self._next - 1


class PartitionProducers:
    """Sequence state of every idempotent producer writing to one partition."""

    def __init__(self) -> None:
        self._epochs: dict[int, int] = {}
        self._batches: dict[int, deque[AppendedBatch]] = {}
        self.segment = -1   # the log's active segment when this state was last snapshotted

    def check(self, batch: BatchHeader) -> ErrorCode:
        """NONE if the batch may be appended; raises Duplicate for a retry of an appended batch."""
        pid, epoch = batch.producer_id, batch.producer_epoch
        known_epoch = self._epochs.get(pid)
        if known_epoch is None or epoch > known_epoch:
            # A new producer (or a bumped epoch) starts its sequence at zero.
            return ErrorCode.NONE if batch.base_sequence == 0 else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if epoch < known_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        cached = self._batches[pid]
        for appended in cached:
            if appended.first_sequence == batch.base_sequence and appended.last_sequence == batch.last_sequence:
                raise Duplicate(appended.base_offset)
        expected = (cached[-1].last_sequence + 1) & 0x7FFFFFFF
        return ErrorCode.NONE if batch.base_sequence == expected else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    def save(self, directory: Path, offset: int) -> None:
        """Snapshot the state as of log end offset ``offset``."""
        producers = {str(pid): [self._epochs[pid], [[b.first_sequence, b.last_sequence, b.base_offset] for b in batches]]
                     for pid, batches in self._batches.items()}
        replace_atomically(directory / PRODUCER_SNAPSHOT, json.dumps({"offset": offset, "producers": producers}))

    @classmethod
    def load(cls, directory: Path) -> tuple[PartitionProducers, int] | None:
        """The snapshot in ``directory`` and the offset it covers; None if there is none (or it is unreadable)."""
        path = directory / PRODUCER_SNAPSHOT
        try:
            data = json.loads(path.read_text())
            producers = cls()
            for pid, (epoch, batches) in data["producers"].items():
                producers._epochs[int(pid)] = int(epoch)
                producers._batches[int(pid)] = deque((AppendedBatch(*map(int, b)) for b in batches),
                                                     maxlen=CACHED_BATCHES)
            return producers, int(data["offset"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def appended(self, batch: BatchHeader, base_offset: int) -> None:
        pid = batch.producer_id
        if self._epochs.get(pid) != batch.producer_epoch:
            self._epochs[pid] = batch.producer_epoch
            self._batches[pid] = deque(maxlen=CACHED_BATCHES)
        self._batches[pid].append(AppendedBatch(batch.base_sequence, batch.last_sequence, base_offset,
                                                batch.max_timestamp))

    def active(self) -> list[tuple[int, int, AppendedBatch]]:
        """(producer id, epoch, last batch appended) of each producer known here (DescribeProducers)."""
        return [(pid, self._epochs[pid], batches[-1]) for pid, batches in self._batches.items()]
