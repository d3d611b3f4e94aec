"""Sparse segment indexes: fixed-width big-endian entries, appended in key order, binary-searched.

- ``.index``     (offset index): offset u32 -> byte position u32 of the batch starting there.
- ``.timeindex`` (time index):   max timestamp so far i64 -> offset u32 of the batch holding it.

Offsets are stored relative to the segment's base offset (so they fit in 4 bytes); an
index knows that base and takes and returns absolute offsets, so no caller does that
arithmetic. Both are kept in memory as two parallel arrays (a 1 GiB segment with the
default 4 KiB interval needs ~256k entries); new entries reach their file at ``flush``,
which opens it just for that, so an index holds no file descriptor. An index that fails
its sanity checks on load is reported as corrupt so the segment rebuilds it from the log.
"""
from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from .files import write_fully

MAX_RELATIVE_OFFSET = 0xFFFFFFFF  # offsets are stored relative to the base offset as u32


class SparseIndex:
    ENTRY: struct.Struct
    KEY_TYPE: str
    _relative_offsets: array   # _keys or _values, whichever holds offsets (relative to the base)

    def __init__(self, path: Path, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._keys = array(self.KEY_TYPE)
        self._values = array("I")
        self._stored = 0   # entries already in the file

    @classmethod
    def create(cls, path: Path, base_offset: int) -> SparseIndex:
        """A new, empty index (truncating any file there)."""
        with open(path, "wb"):
            pass
        return cls(path, base_offset)

    @classmethod
    def load(cls, path: Path, base_offset: int, segment_size: int) -> SparseIndex | None:
        """The index stored at ``path``, or None when it is missing or fails its sanity checks."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) % cls.ENTRY.size:
            return None
        index = cls(path, base_offset)
        for key, value in cls.ENTRY.iter_unpack(data):
            index._add(key, value)
        index._stored = len(index)
        return index if index._sane(segment_size) else None

    def _sane(self, segment_size: int) -> bool:
        keys, values = self._keys, self._values
        return (all(a < b for a, b in zip(keys, keys[1:]))
                and all(a <= b for a, b in zip(values, values[1:])))

    def can_hold(self, offset: int) -> bool:
        """Whether ``offset`` fits in an entry (else it belongs to a later segment)."""
        return offset - self.base_offset <= MAX_RELATIVE_OFFSET

    def _absolute(self, relative_offset: int) -> int:
        return self.base_offset + relative_offset

    def _relative(self, offset: int) -> int:
        return offset - self.base_offset

    def _add(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` entries, in memory and in the file."""
        del self._keys[count:], self._values[count:]
        if self._stored > count:
            os.truncate(self.path, count * self.ENTRY.size)
            self._stored = count

    def truncate_from(self, offset: int) -> None:
        """Drop the entries of the batches at or after ``offset``."""
        self.truncate(bisect_left(self._relative_offsets, self._relative(offset)))

    def __len__(self) -> int:
        return len(self._keys)

    def flush(self) -> None:
        """Write the entries appended since the last flush, and fsync them."""
        written = self.write_pending()
        if written is not None:
            fd, _ = written
            try:
                os.fsync(fd)
            except OSError:
                self.unwrite(written)
                raise
            finally:
                os.close(fd)

    def write_pending(self) -> tuple[int, int] | None:
        """Write the entries appended since the last flush to the page cache; returns (an open
        descriptor for the caller to fsync and close, the stored count before), or None if none."""
        stored = self._stored
        if stored == len(self):
            return None
        new = zip(self._keys[stored:], self._values[stored:])
        pending = b"".join(self.ENTRY.pack(key, value) for key, value in new)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            # At the stored length, not appended: whatever a failed flush left past it is overwritten.
            write_fully(fd, pending, stored * self.ENTRY.size)
        except OSError:
            os.close(fd)
            raise
        self._stored = len(self)
        return fd, stored

    def unwrite(self, written: tuple[int, int]) -> None:
        """Its fsync failed: the entries ``write_pending`` wrote are written again next time."""
        self._stored = min(self._stored, written[1])


class OffsetIndex(SparseIndex):
    ENTRY = struct.Struct(">II")
    KEY_TYPE = "I"

    def _sane(self, segment_size: int) -> bool:
        return super()._sane(segment_size) and (not self._values or self._values[-1] < segment_size)

    @property
    def _relative_offsets(self) -> array:
        return self._keys

    def append(self, offset: int, position: int) -> None:
        """The batch starting at ``offset`` starts at byte ``position``."""
        self._add(self._relative(offset), position)

    def position_for(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before ``offset`` (0 if none)."""
        i = bisect_right(self._keys, self._relative(offset))
        return self._values[i - 1] if i else 0

    def boundary_at_or_before(self, position: int) -> int:
        """The last indexed batch start at or before byte ``position`` (0 if none)."""
        i = bisect_right(self._values, position)
        return self._values[i - 1] if i else 0

    @property
    def last_position(self) -> int:
        """Position of the last indexed batch (0 if none)."""
        return self._values[-1] if self._values else 0

    def last_entry_below(self, offset: int) -> tuple[int, int] | None:
        """(offset, position) of the last indexed batch starting below ``offset``, None if there is none."""
        i = bisect_left(self._keys, self._relative(offset))
        return (self._absolute(self._keys[i - 1]), self._values[i - 1]) if i else None


class TimeIndex(SparseIndex):
    ENTRY = struct.Struct(">qI")
    KEY_TYPE = "q"

    @property
    def _relative_offsets(self) -> array:
        return self._values

    def append(self, timestamp: int, offset: int) -> None:
        """The largest timestamp up to the batch starting at ``offset`` is ``timestamp``."""
        self._add(timestamp, self._relative(offset))

    @property
    def max_timestamp(self) -> int | None:
        return self._keys[-1] if self._keys else None

    @property
    def offset_of_max_timestamp(self) -> int | None:
        return self._absolute(self._values[-1]) if self._values else None

    def offset_before(self, timestamp: int) -> int:
        """Offset of a batch such that every record before it has a timestamp < ``timestamp``."""
        i = bisect_left(self._keys, timestamp)
        return self._absolute(self._values[i - 1] if i else 0)
