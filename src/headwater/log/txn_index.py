"""A partition's index of aborted transactions (Kafka's TransactionIndex, one per log here).

Each entry is (producer id, first offset, last offset): the producer's transactional
batches from the first offset up to the abort marker at the last offset were aborted.
read_committed fetches hand the entries in range to the client, which drops those batches;
the cleaner removes their records. A file of fixed 24-byte entries in the partition's
directory, appended as abort markers are written; entries wholly below the log start
offset are dropped when retention moves it, and those whose marker the cleaner removed.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from headwater.records import BatchHeader

from .layout import ABORTED_TRANSACTIONS, TMP

_ENTRY = struct.Struct(">qqq")


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int

    def covers(self, producer_id: int, offset: int) -> bool:
        return producer_id == self.producer_id and self.first_offset <= offset <= self.last_offset


def is_aborted(header: BatchHeader, aborted: list[AbortedTxn]) -> bool:
    """Whether ``header``'s batch holds data of one of the ``aborted`` transactions."""
    return bool(aborted) and header.is_transactional and not header.is_control and any(
        a.covers(header.producer_id, header.base_offset) for a in aborted)


class AbortedTxnIndex:
    def __init__(self, directory: Path):
        self._path = directory / ABORTED_TRANSACTIONS
        data = self._path.read_bytes() if self._path.exists() else b""
        whole = len(data) - len(data) % _ENTRY.size   # a torn last entry (a crash mid-append) is dropped
        self.entries = [AbortedTxn(*e) for e in _ENTRY.iter_unpack(data[:whole])]

    def append(self, entry: AbortedTxn) -> None:
        with open(self._path, "ab") as f:
            f.write(_ENTRY.pack(entry.producer_id, entry.first_offset, entry.last_offset))
        self.entries = self.entries + [entry]   # a new list: the cleaner's thread may be iterating the old one

    def between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions with records in [start, end)."""
        return [a for a in self.entries if a.last_offset >= start and a.first_offset < end]

    def truncate_before(self, offset: int) -> None:
        """Forget transactions that lie wholly below ``offset`` (the new log start offset)."""
        self._keep([a for a in self.entries if a.last_offset >= offset])

    def forget_markers(self, marker_offsets: set[int]) -> None:
        """Forget the transactions whose abort markers the cleaner removed (their records went first)."""
        self._keep([a for a in self.entries if a.last_offset not in marker_offsets])

    def _keep(self, kept: list[AbortedTxn]) -> None:
        if len(kept) == len(self.entries):
            return
        tmp = self._path.with_name(self._path.name + TMP)
        tmp.write_bytes(b"".join(_ENTRY.pack(a.producer_id, a.first_offset, a.last_offset) for a in kept))
        tmp.replace(self._path)
        self.entries = kept
