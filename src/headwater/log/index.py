"""Sparse segment indexes: fixed-width big-endian entries, appended in key order, binary-searched.

- ``.index``     (offset index): relative offset u32 -> byte position u32 of the batch starting there.
- ``.timeindex`` (time index):   max timestamp so far i64 -> relative offset u32 of the batch holding it.

Both are kept in memory as two parallel arrays (a 1 GiB segment with the default 4 KiB
interval needs ~256k entries); new entries reach their file at ``flush``, which opens it
just for that, so an index holds no file descriptor. An index that fails its sanity
checks on load is reported as corrupt so the segment rebuilds it from the log.
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from .files import write_fully


class SparseIndex:
    ENTRY: struct.Struct
    KEY_TYPE: str

    def __init__(self, path: Path):
        self.path = path
        self.keys = array(self.KEY_TYPE)
        self.values = array("I")
        self._stored = 0   # entries already in the file

    @classmethod
    def create(cls, path: Path) -> SparseIndex:
        """A new, empty index (truncating any file there)."""
        with open(path, "wb"):
            pass
        return cls(path)

    @classmethod
    def load(cls, path: Path, segment_size: int) -> SparseIndex | None:
        """The index stored at ``path``, or None when it is missing or fails its sanity checks."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % cls.ENTRY.size:
            return None
        index = cls(path)
        for key, value in cls.ENTRY.iter_unpack(data):
            index.keys.append(key)
            index.values.append(value)
        index._stored = len(index)
        return index if index._sane(segment_size) else None

    def _sane(self, segment_size: int) -> bool:
        keys, values = self.keys, self.values
        return (all(a < b for a, b in zip(keys, keys[1:]))
                and all(a <= b for a, b in zip(values, values[1:])))

    def append(self, key: int, value: int) -> None:
        self.keys.append(key)
        self.values.append(value)

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` entries, in memory and in the file."""
        del self.keys[count:], self.values[count:]
        if self._stored > count:
            os.truncate(self.path, count * self.ENTRY.size)
            self._stored = count

    def __len__(self) -> int:
        return len(self.keys)

    def flush(self) -> None:
        """Write the entries appended since the last flush, and fsync them."""
        if self._stored == len(self):
            return
        pending = b"".join(self.ENTRY.pack(k, v) for k, v in zip(self.keys[self._stored:], self.values[self._stored:]))
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            # At the stored length, not appended: whatever a failed flush left past it is overwritten.
            write_fully(fd, pending, self._stored * self.ENTRY.size)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._stored = len(self)


class OffsetIndex(SparseIndex):
    ENTRY = struct.Struct(">II")
    KEY_TYPE = "I"

    def _sane(self, segment_size: int) -> bool:
        return super()._sane(segment_size) and (not self.values or self.values[-1] < segment_size)

    def position_for(self, relative_offset: int) -> int:
        """Position of the last indexed batch starting at or before ``relative_offset`` (0 if none)."""
        i = bisect_right(self.keys, relative_offset)
        return self.values[i - 1] if i else 0

    def boundary_at_or_before(self, position: int) -> int:
        """The last indexed batch start at or before byte ``position`` (0 if none)."""
        i = bisect_right(self.values, position)
        return self.values[i - 1] if i else 0


class TimeIndex(SparseIndex):
    ENTRY = struct.Struct(">qI")
    KEY_TYPE = "q"

    @property
    def max_timestamp(self) -> int | None:
        return self.keys[-1] if self.keys else None

    def offset_before(self, timestamp: int) -> int:
        """Relative offset of a batch such that every record before it has a timestamp < ``timestamp``."""
        i = bisect_left(self.keys, timestamp)
        return self.values[i - 1] if i else 0
