"""Transactions as one partition sees them: the open ones (which hold back the last stable
offset) and the index of aborted ones (which read_committed consumers skip).

The last stable offset (LSO) is the first offset of the oldest transaction still open in
the partition, or the high watermark when none is: a read_committed consumer reads up to
it and no further. The aborted index holds (producer id, first offset, marker offset) of
every aborted transaction, so a Fetch can tell the client which producers' batches in the
range to drop. It is a file of fixed 24-byte entries in the partition's directory, appended
as markers are written.
"""
from __future__ import annotations

import logging
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from headwater.log import Log
from headwater.log.layout import ABORTED_TRANSACTIONS
from headwater.records import NO_PRODUCER_ID, BatchHeader, encode_marker, iter_batches

if TYPE_CHECKING:
    from headwater.broker.growth import GrowthSignals
    from headwater.log import LogManager

log = logging.getLogger("headwater.txn")

_ENTRY = struct.Struct(">qqq")   # producer id, first offset, last offset (the abort marker)
COORDINATOR_EPOCH = 0            # one broker: the coordinator never moves
READ_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class PartitionTxns:
    """One partition's open transactions (producer id -> first offset) and aborted index."""
    index_path: Path
    open: dict[int, int] = field(default_factory=dict)
    aborted: list[AbortedTxn] = field(default_factory=list)

    @classmethod
    def load(cls, directory: Path) -> PartitionTxns:
        path = directory / ABORTED_TRANSACTIONS
        data = path.read_bytes() if path.exists() else b""
        whole = len(data) - len(data) % _ENTRY.size   # a torn last entry is dropped
        return cls(path, aborted=[AbortedTxn(*e) for e in _ENTRY.iter_unpack(data[:whole])])

    def last_stable_offset(self, high_watermark: int) -> int:
        return min(self.open.values(), default=high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end)."""
        return [a for a in self.aborted if a.last_offset >= start and a.first_offset < end]

    def ended(self, producer_id: int, marker_offset: int, commit: bool) -> None:
        first = self.open.pop(producer_id, None)
        if first is None or commit:
            return
        entry = AbortedTxn(producer_id, first, marker_offset)
        with open(self.index_path, "ab") as f:
            f.write(_ENTRY.pack(entry.producer_id, entry.first_offset, entry.last_offset))
        self.aborted.append(entry)


def _headers(plog: Log, start: int) -> Iterator[BatchHeader]:
    offset = start
    while offset < plog.log_end_offset:
        chunk = plog.read(offset, READ_CHUNK)
        if not chunk:
            return
        for _, header in iter_batches(chunk, validate=False):
            if header.last_offset >= offset:
                yield header
            offset = header.last_offset + 1


class TxnPartitions:
    """Every partition's transaction state, and the writer of transaction markers."""

    def __init__(self, logs: LogManager, growth: GrowthSignals):
        self._logs, self._growth = logs, growth
        self._partitions: dict[tuple[str, int], PartitionTxns] = {}

    def get(self, topic: str, partition: int, plog: Log) -> PartitionTxns:
        state = self._partitions.get((topic, partition))
        if state is None:
            state = self._partitions[(topic, partition)] = PartitionTxns.load(plog.directory)
        return state

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._partitions if k[0] == topic]:
            del self._partitions[key]

    def appended(self, topic: str, partition: int, plog: Log, header: BatchHeader, offset: int) -> None:
        """A transactional batch went in at ``offset``: its transaction is open here from its first batch."""
        self.get(topic, partition, plog).open.setdefault(header.producer_id, offset)

    def last_stable_offset(self, topic: str, partition: int, plog: Log) -> int:
        state = self._partitions.get((topic, partition))
        return plog.log_end_offset if state is None else state.last_stable_offset(plog.log_end_offset)

    def aborted_between(self, topic: str, partition: int, plog: Log, start: int, end: int) -> list[AbortedTxn]:
        return self.get(topic, partition, plog).aborted_between(start, end)

    def recover_open(self, topic: str, partition: int, producer_id: int) -> None:
        """After a restart: find where ``producer_id``'s unfinished transaction begins in this
        partition (its first transactional batch after its last marker), so the marker that
        ends it indexes it right."""
        plog = self._logs.get_log(topic, partition)
        if plog is None:
            return
        first = None
        for header in _headers(plog, plog.log_start_offset):
            if header.producer_id != producer_id or header.producer_id == NO_PRODUCER_ID:
                continue
            if header.is_control:
                first = None
            elif header.is_transactional and first is None:
                first = header.base_offset
        state = self.get(topic, partition, plog)
        if first is not None:
            state.open[producer_id] = first

    def is_open(self, topic: str, partition: int, producer_id: int) -> bool:
        state = self._partitions.get((topic, partition))
        return state is not None and producer_id in state.open

    def write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool) -> bool:
        """End ``producer_id``'s transaction in one partition; False if the partition is gone or
        refused the write (logged)."""
        plog = self._logs.get_log(topic, partition)
        if plog is None:
            return False
        marker = bytearray(encode_marker(producer_id, producer_epoch, commit, COORDINATOR_EPOCH,
                                         int(time.time() * 1000)))
        try:
            offset, _ = plog.append(marker)
        except OSError as exc:
            log.error("cannot write a transaction marker to %s-%d: %s", topic, partition, exc)
            return False
        self.get(topic, partition, plog).ended(producer_id, offset, commit)
        self._growth.notify(topic, partition)
        return True
