"""A log segment: one ``<20-digit base offset>.log`` file of record batches plus its two indexes.

Batches are stored exactly as the producer sent them (base offset stamped in). The
``.log`` descriptor is borrowed from a bounded pool (files.py) for each read or write.
Appends are ``pwrite``s at the segment's size, not O_APPEND writes: an append that fails
part-way (a full disk) is cut back off, and if even that fails the next append overwrites
it, so a torn batch never sits between acknowledged ones.
"""
from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from headwater.records import BatchHeader, CorruptRecordError, decode_records, read_header
from headwater.records.layout import ATTR_LOG_APPEND_TIME, HEADER_SIZE, MAGIC, MIN_BATCH_LENGTH, validate_batch

from .files import SEGMENT_FILES, write_fully
from .index import OffsetIndex, SparseIndex, TimeIndex
from .layout import INDEX, LOG, SEGMENT_SUFFIXES, TIME_INDEX, segment_file

SCAN_CHUNK = 64 * 1024          # read-ahead when walking batch headers
RECOVERY_CHUNK = 8 * 1024 * 1024  # read-ahead when validating whole batches
NO_TIMESTAMP = -1


def delete_segment_files(directory: Path, base_offset: int) -> None:
    for suffix in SEGMENT_SUFFIXES:
        segment_file(directory, base_offset, suffix).unlink(missing_ok=True)


@dataclass(slots=True)
class BatchInfo:
    """What the log needs to know about one batch it writes: no record is opened."""
    position: int      # within the buffer being appended, then within the segment
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int


class Segment:
    def __init__(self, directory: Path, base_offset: int, index_interval_bytes: int, suffix: str = ""):
        self.directory = directory
        self.base_offset = base_offset
        self.suffix = suffix   # ".cleaned" / ".swap" while the log cleaner builds a replacement
        self.path = segment_file(directory, base_offset, LOG + suffix)
        self.index_interval_bytes = index_interval_bytes
        with SEGMENT_FILES.use(self.path) as fd:
            self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.rolling_ms: int | None = None   # when the segment's age starts counting (segment.ms)
        self.offset_index: OffsetIndex
        self.time_index: TimeIndex
        self._bytes_since_index = 0
        self._dirty = False
        # Where the last read that reached the end of the file stopped: (next offset, position). The
        # batches before the position all end before the offset (the file only grows while open), so a
        # consumer reading on from there starts at that batch instead of walking the headers of every
        # small batch after the last index entry (index.interval.bytes of them: dozens at a time).
        self._read_end = (base_offset, 0)

    # --- opening ---------------------------------------------------------------------------

    @classmethod
    def create(cls, directory: Path, base_offset: int, index_interval_bytes: int, suffix: str = "") -> Segment:
        segment = cls(directory, base_offset, index_interval_bytes, suffix)
        segment.offset_index = OffsetIndex.create(segment.index_path, base_offset)
        segment.time_index = TimeIndex.create(segment.time_index_path, base_offset)
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval_bytes: int,
             recovery_point: int | None, suffix: str = "") -> tuple[Segment, int]:
        """Open an existing segment; returns it and how many bytes recovery truncated.

        ``recovery_point`` None (a clean shutdown): the stored indexes are trusted and only
        the tail after the last index entry is walked to find the end. Otherwise every
        batch from the recovery point on (from the last indexed batch before it) is
        validated (CRC, lengths, offsets), the file is truncated at the first bad one and
        the indexes are rebuilt from there; what lies below was fsynced, indexes included,
        and is trusted. Missing or corrupt indexes make the whole segment validated.
        ``suffix``: the log cleaner's rewrite (``.cleaned``) rather than the segment.
        """
        segment = cls(directory, base_offset, index_interval_bytes, suffix)
        offset_index = OffsetIndex.load(segment.index_path, base_offset, segment.size)
        time_index = TimeIndex.load(segment.time_index_path, base_offset, segment.size)
        truncated = None
        if offset_index is not None and time_index is not None:
            segment.offset_index, segment.time_index = offset_index, time_index
            if recovery_point is None:
                truncated = 0 if segment._load_tail() else None
            elif recovery_point > base_offset:
                position = segment._seek_recovery_point(recovery_point)
                truncated = None if position is None else segment._recover_from(position)
        if truncated is None:
            truncated = segment.recover()
        segment.rolling_ms = int(time.time() * 1000) if segment.size else None
        return segment, truncated

    @property
    def index_path(self) -> Path:
        return segment_file(self.directory, self.base_offset, INDEX + self.suffix)

    @property
    def time_index_path(self) -> Path:
        return segment_file(self.directory, self.base_offset, TIME_INDEX + self.suffix)

    def rename(self, suffix: str) -> None:
        """Give the three files a new suffix, indexes first: the ``.log`` rename is the step that counts."""
        self.suffix, old = suffix, (self.offset_index.path, self.time_index.path, self.path)
        self.path = segment_file(self.directory, self.base_offset, LOG + suffix)
        self.offset_index.path, self.time_index.path = self.index_path, self.time_index_path
        for source, target in zip(old, (self.offset_index.path, self.time_index.path, self.path)):
            os.replace(source, target)
        SEGMENT_FILES.renamed(old[2], self.path)

    def _seek_recovery_point(self, recovery_point: int) -> int | None:
        """Where validation resumes: the last indexed batch below ``recovery_point`` (so at most
        ``index.interval.bytes`` of fsynced data is validated again). Keeps the index entries
        and the offset and timestamp tracking as they were before that batch; None if no
        indexed batch lies below the point."""
        entry = self.offset_index.last_entry_below(recovery_point)
        if entry is None:
            return None
        offset, position = entry
        self.offset_index.truncate_from(offset)
        # An entry pointing below the batch is true whenever it was written; the others are rebuilt.
        self.time_index.truncate_from(offset)
        self._track_time_index()
        self.next_offset = offset
        self._bytes_since_index = self.index_interval_bytes  # the batch's index entry is written again
        return position

    def _track_time_index(self) -> None:
        """The max timestamp so far, from the time index."""
        if self.time_index.max_timestamp is not None:
            self.max_timestamp = self.time_index.max_timestamp
            self.offset_of_max_timestamp = self.time_index.offset_of_max_timestamp

    def _load_tail(self) -> bool:
        """Find the end offset and max timestamp from the last index entries; False if the tail is torn."""
        self._track_time_index()
        start = self.offset_index.last_position
        end = start
        for position, header in self.iter_headers(start):
            if header.magic != MAGIC or header.base_offset < self.next_offset:
                return False
            self._track(header.base_offset, header.last_offset, header.max_timestamp)
            end = position + header.size
        self._bytes_since_index = end - start
        return end == self.size

    def recover(self) -> int:
        """Validate every batch, truncate after the last good one, rebuild both indexes."""
        self.offset_index = OffsetIndex.create(self.index_path, self.base_offset)
        self.time_index = TimeIndex.create(self.time_index_path, self.base_offset)
        self.next_offset = self.base_offset
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index = 0
        return self._recover_from(0)

    def _recover_from(self, position: int) -> int:
        """Validate the batches from ``position`` (a batch boundary whose offset and index
        state are known), index them, truncate after the last good one."""
        end = position
        for header in self._valid_batches(position):
            self._index(BatchInfo(end, header.base_offset, header.last_offset, header.max_timestamp, header.size))
            end += header.size
        self._maybe_index_time()  # the final max timestamp, as seal() leaves it
        truncated = self.size - end
        if truncated:
            with SEGMENT_FILES.use(self.path) as fd:
                os.ftruncate(fd, end)
            self.size = end
        self._dirty = True
        return truncated

    def _valid_batches(self, position: int) -> Iterator[BatchHeader]:
        """Yield the headers of the valid batches from ``position`` on, in order."""
        for _, _, window, at in self._walk(position, RECOVERY_CHUNK, whole=True):
            try:
                header = validate_batch(window, at)
            except CorruptRecordError:
                return
            if header.base_offset < self.next_offset or not self.can_hold(header.last_offset):
                return
            self.next_offset = header.last_offset + 1
            yield header

    # --- writing ---------------------------------------------------------------------------

    def can_hold(self, offset: int) -> bool:
        """Whether a batch ending at ``offset`` may go in this segment (its indexes store offsets as u32)."""
        return self.offset_index.can_hold(offset)

    def append(self, data, batches: list[BatchInfo], now_ms: int | None = None) -> None:
        """Write ``data`` (whole batches, offsets stamped) and index it; ``batches`` positions are within ``data``.

        An OSError (ENOSPC, EIO) leaves the segment as it was: size, indexes, and the file
        cut back to its old length."""
        start = self.size
        with SEGMENT_FILES.use(self.path) as fd:
            try:
                write_fully(fd, data, start)
            except OSError:
                try:
                    os.ftruncate(fd, start)
                except OSError:
                    pass  # the next append writes at ``start`` over the torn bytes anyway
                raise
        if self.rolling_ms is None:
            self.rolling_ms = int(time.time() * 1000) if now_ms is None else now_ms
        for batch in batches:
            batch.position += start
            self._index(batch)
        self.size = start + len(data)
        self._dirty = True

    def _index(self, batch: BatchInfo) -> None:
        self._track(batch.base_offset, batch.last_offset, batch.max_timestamp)
        if self._bytes_since_index >= self.index_interval_bytes and batch.position > 0:
            self.offset_index.append(batch.base_offset, batch.position)
            self._maybe_index_time()
            self._bytes_since_index = 0
        self._bytes_since_index += batch.size

    def _track(self, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        self.next_offset = last_offset + 1
        if max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, base_offset

    def _maybe_index_time(self) -> None:
        latest = self.time_index.max_timestamp
        if self.max_timestamp != NO_TIMESTAMP and (latest is None or self.max_timestamp > latest):
            self.time_index.append(self.max_timestamp, self.offset_of_max_timestamp)

    def seal(self) -> None:
        """The segment stops being active: record its final max timestamp in the time index."""
        self._maybe_index_time()

    def flush(self) -> None:
        pending = self.prepare_flush()
        pending.sync()

    def prepare_flush(self, indexes: bool = True) -> SegmentFlush:
        """The first half of a flush, under the log's lock: the ``.log`` descriptor pinned, and with
        ``indexes`` the index entries written to the page cache. ``SegmentFlush.sync`` then fsyncs
        without the lock."""
        pending = SegmentFlush(self)
        try:
            if self._dirty:
                pending.log_fd = pending.pins.enter_context(SEGMENT_FILES.use(self.path))
                self._dirty = False
            for index in (self.offset_index, self.time_index) if indexes else ():
                written = index.write_pending()
                if written is not None:
                    pending.indexes.append((index, written))
        except OSError:
            pending.undo()
            raise
        return pending

    def close(self) -> None:
        """Write the index entries still pending (those of a rebuilt index, say) and let go of the file."""
        self.offset_index.flush()
        self.time_index.flush()
        self.release()

    def release(self) -> None:
        """Let go of the file without writing anything (it is about to be deleted)."""
        SEGMENT_FILES.close(self.path)

    def delete(self) -> None:
        self.release()
        delete_segment_files(self.directory, self.base_offset)

    # --- reading ---------------------------------------------------------------------------

    def iter_headers(self, position: int) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of the whole batches from ``position`` to the end of the file."""
        for position, header, _, _ in self._walk(position, SCAN_CHUNK, whole=False):
            yield position, header

    def _walk(self, position: int, read_ahead: int, whole: bool) -> Iterator[tuple[int, BatchHeader, bytes, int]]:
        """The one read loop over the file: yield (position, header, window, at) for each batch from
        ``position`` until the end of the file or a length that cannot be right. The batch starts
        at ``window[at]``; the window, read ``read_ahead`` bytes at a time, holds its header, and
        the whole batch if ``whole``. (A window and an index, not a memoryview slice per batch:
        that slice alone would slow a fetch by a fifth.)"""
        window, window_start = b"", position
        while position + HEADER_SIZE <= self.size:
            at = position - window_start
            if at + HEADER_SIZE > len(window):
                window, window_start, at = self._pread(read_ahead, position), position, 0
            header = read_header(window, at)
            if header.batch_length < MIN_BATCH_LENGTH or position + header.size > self.size:
                return
            if whole and at + header.size > len(window):
                window, window_start, at = self._pread(max(read_ahead, header.size), position), position, 0
            yield position, header, window, at
            position += header.size

    def read(self, offset: int, max_bytes: int, min_one: bool = True, enough: int | None = None) -> bytes | None:
        """Whole batches from the one containing ``offset`` (or the first after it), within
        ``max_bytes`` but at least one batch if ``min_one`` (else b"" when the first does not
        fit); None if no batch here reaches ``offset``. With ``enough``, none past the first that
        starts at or after it (a share fetch that wants 500 records need not read 1 MB of them)."""
        end_offset, end_position = self._read_end
        stop, stop_offset = (self.size, self.next_offset) if enough is None else self._batch_from(enough)
        if offset == end_offset and end_position < stop <= end_position + max_bytes:
            # the consumer reads on from there and everything since fits: one read, no header walked
            data = self._pread(stop - end_position, end_position)
            if len(data) == stop - end_position:   # else the file lost bytes: the walk below says how
                self._read_end = (stop_offset, stop)
                return data
        start, from_position = None, self.offset_index.position_for(offset)
        if end_offset <= offset and end_position > from_position:
            from_position = end_position
        for position, header in self.iter_headers(from_position):
            if header.last_offset >= offset:
                start, end = position, position + header.size
                break
        if start is None:
            return None
        if not min_one and header.size > max_bytes:
            return b""
        limit = min(start + max(max_bytes, 0), max(stop, end))
        if limit >= self.size:
            end = self.size
            self._read_end = (self.next_offset, end)
        elif limit == stop:
            end = stop
            self._read_end = (stop_offset, stop)
        else:
            # Every indexed position is a batch boundary: jump to the last one within the limit.
            end = max(end, self.offset_index.boundary_at_or_before(limit))
            for position, header in self.iter_headers(end):
                if position + header.size > limit:
                    break
                end = position + header.size
        return self._pread(end - start, start)

    def _batch_from(self, offset: int) -> tuple[int, int]:
        """(position, base offset) of the first batch that starts at or after ``offset``, or
        (size, next offset) if none does."""
        for position, header in self.iter_headers(self.offset_index.position_for(offset)):
            if header.base_offset >= offset:
                return position, header.base_offset
        return self.size, self.next_offset

    def batch_at(self, position: int, size: int) -> bytes:
        return self._pread(size, position)

    def _pread(self, size: int, position: int) -> bytes:
        with SEGMENT_FILES.use(self.path) as fd:
            return os.pread(fd, size, position)

    def find_timestamp(self, timestamp: int, from_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at/after ``from_offset`` with timestamp >= ``timestamp``."""
        if self.max_timestamp < timestamp:
            return None
        start_offset = max(self.time_index.offset_before(timestamp), from_offset)
        for position, header in self.iter_headers(self.offset_index.position_for(start_offset)):
            if header.max_timestamp < timestamp or header.last_offset < from_offset:
                continue
            found = _first_record_at_or_after(header, self.batch_at(position, header.size), timestamp, from_offset)
            if found:
                return found
        return None


class SegmentFlush:
    """One segment's fsyncs, prepared under the log's lock and run without it, so appends to the
    same log go on meanwhile. The descriptors stay valid even if the segment is deleted or swapped
    in between (pinned, or private): the fsync then reaches an unlinked file, harmlessly."""

    def __init__(self, segment: Segment):
        self.segment = segment
        self.pins = ExitStack()
        self.log_fd: int | None = None
        self.indexes: list[tuple[SparseIndex, tuple[int, int]]] = []

    def sync(self) -> None:
        """fsync the files and let go of them; on failure the segment is left to be flushed again."""
        try:
            if self.log_fd is not None:
                os.fsync(self.log_fd)
            for _, (fd, _) in self.indexes:
                os.fsync(fd)
        except OSError:
            self.undo()
            raise
        finally:
            self.release()

    def undo(self) -> None:
        if self.log_fd is not None:
            self.segment._dirty = True
        for index, written in self.indexes:
            index.unwrite(written)
        self.release()

    def release(self) -> None:
        self.pins.close()
        for _, (fd, _) in self.indexes:
            os.close(fd)
        self.indexes, self.log_fd = [], None


def _first_record_at_or_after(header: BatchHeader, batch: bytes, timestamp: int, from_offset: int):
    _, records = decode_records(batch)
    for record in records:
        # LogAppendTime batches: every record carries the batch's (broker) timestamp.
        record_ts = header.max_timestamp if header.attributes & ATTR_LOG_APPEND_TIME else record.timestamp
        if record.offset >= from_offset and record_ts >= timestamp:
            return record.offset, record_ts
    return None
