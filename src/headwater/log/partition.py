"""The log of one topic-partition: an ordered list of segments in one directory.

Files in the directory besides the segments:
- ``recovery-point``   an offset below which everything was fsynced, indexes included (text,
                       replaced atomically): the log's checkpoint, written as Kafka writes its
                       recovery-point-offset-checkpoint, every ``log.flush.offset.checkpoint.interval.ms``
                       (by the first flush after it has passed) and at close, not after each flush;
- ``log-start-offset`` the first offset still readable, once retention or DeleteRecords moved it
                       (fsynced before any segment below it is deleted);
- ``cleaner-checkpoint`` where the log cleaner's dirty section begins;
- ``.clean-shutdown``  written by ``close()`` after the last fsync, removed at open: its absence
                       at open means a crash, so the batches from the recovery point on are
                       validated one by one and the log truncated at the first bad one.

Threads: the broker calls everything from its event loop; the log cleaner and retention
may run on another thread, fsyncs on the broker's group-commit threads. ``lock``
guards the segment list and every file operation (held briefly: one append, one read, one
swap; never across an fsync, so appends go on while the log is flushed); ``maintenance_lock``
is held by whoever deletes or rewrites closed segments (cleaner, retention) so they never
overlap; ``flush_lock`` makes flushes one at a time (taken before the other two).
"""
from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from headwater.records import BatchHeader, CorruptRecordError, Record, decode_records, iter_batches, read_header
from headwater.records.layout import MIN_BATCH_LENGTH, set_base_offset, set_log_append_time

from .config import LogConfig
from .layout import (CLEAN_SHUTDOWN, CLEANER_CHECKPOINT, DELETED, LOG_START_OFFSET, RECOVERY_POINT, TMP,
                     fsync_directory, replace_atomically, segment_base_offsets)
from .offset_columns import NO_UNSTABLE, OffsetColumns
from .recovery import complete_interrupted_swaps
from .segment import NO_TIMESTAMP, BatchInfo, Segment, SegmentFlush, delete_segment_files
from .txn_index import AbortedTxnIndex, is_aborted

logger = logging.getLogger("headwater.log")
CHECKPOINT_INTERVAL_MS = 60_000   # log.flush.offset.checkpoint.interval.ms, Kafka's default


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class OffsetOutOfRangeError(Exception):
    """A read below the log start offset or past the log end offset."""


def read_offset_file(path: Path, default: int) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return default


def write_offset_file(path: Path, value: int, durable: bool = False) -> None:
    """Replace atomically. Only ``durable`` writes are fsynced: for the recovery point and the
    cleaner checkpoint, losing an update just means an older, safe value."""
    replace_atomically(path, str(value), durable)


class BatchesRead(NamedTuple):
    records: bytes                            # whole batches
    batches: list[tuple[int, BatchHeader]]    # (position in records, header) of each
    next_offset: int                          # every offset below this is read, or is in no batch


class Log:
    def __init__(self, directory: Path, config: LogConfig, segments: list[Segment], log_start_offset: int,
                 recovery_point: int, clock: Callable[[], int] = monotonic_ms,
                 checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS):
        self.directory = directory
        self.config = config
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self._columns: OffsetColumns | None = None   # the topic's columns this log writes its offsets into
        self._slot = 0
        # Everything below recovery_point is fsynced (the .log files); below checkpointed, the
        # indexes too, and the recovery-point file says so: a crash recovers from there.
        self.recovery_point = self.checkpointed = recovery_point
        self._clock = clock   # milliseconds, for flush.ms and the checkpoint interval
        self.checkpoint_interval_ms = checkpoint_interval_ms
        self._checkpointed_at = clock()
        self._new_segment = False   # a roll since the last flush: the directory needs an fsync
        self.cleaner_checkpoint = max(read_offset_file(directory / CLEANER_CHECKPOINT, 0), log_start_offset)
        self.closed = False
        self.tombstones_due_ms: int | None = None   # when the cleaner must drop tombstones it kept
        self.aborted_txns = AbortedTxnIndex(directory)
        self.lock = threading.RLock()
        self._first_unstable_offset: int | None = None
        self.maintenance_lock = threading.Lock()
        self.flush_lock = threading.Lock()
        self._unflushed_messages = 0
        self._last_flush = self._checkpointed_at

    @classmethod
    def open(cls, directory: Path, config: LogConfig, clock: Callable[[], int] = monotonic_ms,
             checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS) -> Log:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / CLEAN_SHUTDOWN
        clean = marker.exists()
        if clean:
            marker.unlink()
            fsync_directory(directory)
        for tmp in directory.glob("*" + TMP):
            tmp.unlink()
        complete_interrupted_swaps(directory)
        recovery_point = read_offset_file(directory / RECOVERY_POINT, 0)
        bases = segment_base_offsets(directory)
        segments: list[Segment] = []
        for i, base in enumerate(bases):
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            unflushed = not clean and (next_base is None or next_base > recovery_point)
            segment, truncated = Segment.open(directory, base, config.index_interval_bytes,
                                              recovery_point if unflushed else None)
            segments.append(segment)
            if truncated:
                # Whatever followed a torn batch was never acknowledged as part of a whole log.
                for later in bases[i + 1:]:
                    delete_segment_files(directory, later)
                break
        log_start_offset = read_offset_file(directory / LOG_START_OFFSET, 0)
        if not segments:
            segments.append(Segment.create(directory, log_start_offset, config.index_interval_bytes))
        log_start_offset = max(log_start_offset, segments[0].base_offset)
        log = cls(directory, config, segments, log_start_offset, min(recovery_point, segments[-1].next_offset),
                  clock, checkpoint_interval_ms)
        if not clean:
            log.checkpoint()  # the rebuilt indexes and truncations are the new durable state
        return log

    # --- offsets and sizes -----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction still open here (set by the broker): the
        cleaner never touches a segment from there on."""
        return self._first_unstable_offset

    @first_unstable_offset.setter
    def first_unstable_offset(self, offset: int | None) -> None:
        with self.lock:
            self._first_unstable_offset = offset
            if self._columns is not None:
                self._columns.unstable[self._slot] = NO_UNSTABLE if offset is None else offset

    def publish_offsets(self, columns: OffsetColumns, slot: int) -> None:
        """Write this log's offsets into ``columns`` at ``slot`` now and at each change from now on."""
        with self.lock:
            self._columns, self._slot = columns, slot
            columns.end[slot] = self.log_end_offset
            columns.start[slot] = self.log_start_offset
            columns.unstable[slot] = NO_UNSTABLE if self._first_unstable_offset is None else self._first_unstable_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def active_segment_base_offset(self) -> int:
        """Where the active segment's readable batches begin."""
        return max(self._segments[-1].base_offset, self.log_start_offset)

    # --- appending -------------------------------------------------------------------------

    def append(self, batches: bytearray, now_ms: int | None = None, flush_policy: bool = True) -> tuple[int, int]:
        """Stamp offsets (and LogAppendTime) into ``batches`` and write them; returns (first, last) offset.

        With ``flush_policy`` the log is flushed here when flush.messages / flush.ms say so;
        without it the caller asks ``flush_due()`` (the broker's produce path, to group commit)."""
        with self.lock:
            appended = self._append(batches, now_ms)
        if flush_policy and self.flush_due():
            try:
                self.flush()
            except OSError as exc:  # the append itself stands; the next one tries the flush again
                logger.warning("cannot flush %s: %s", self.directory, exc)
        return appended

    def _append(self, batches: bytearray, now_ms: int | None) -> tuple[int, int]:
        now = int(time.time() * 1000) if now_ms is None else now_ms
        log_append_time = self.config.log_append_time
        first = offset = self.log_end_offset
        infos, pos, total = [], 0, len(batches)
        while pos < total:
            header = read_header(batches, pos)
            size = header.size
            if header.batch_length < MIN_BATCH_LENGTH or pos + size > total:
                raise CorruptRecordError(f"batch at byte {pos} does not fit the {total} bytes appended")
            set_base_offset(batches, pos, offset)
            max_timestamp = header.max_timestamp
            if log_append_time:
                set_log_append_time(batches, pos, now)
                max_timestamp = now
            last = offset + header.last_offset_delta
            infos.append(BatchInfo(pos, offset, last, max_timestamp, size))
            offset = last + 1
            pos += size
        if not infos:
            raise CorruptRecordError("no record batch to append")
        if self._should_roll(total, offset - 1, now):
            self.roll()
        active = self._segments[-1]
        try:
            active.append(batches, infos, now)
        finally:   # even a failed write may have moved the end: the columns show where it is
            if self._columns is not None:
                self._columns.end[self._slot] = active.next_offset
        self._unflushed_messages += offset - first
        return first, offset - 1

    def _should_roll(self, size: int, last_offset: int, now: int) -> bool:
        active = self.active_segment
        if active.size == 0:
            return False
        return (active.size + size > self.config.segment_bytes
                or now - active.rolling_ms >= self.config.segment_ms
                or not active.can_hold(last_offset))

    def roll(self) -> Segment:
        """Close the active segment for appends and start a new one at the log end offset."""
        active = self.active_segment
        if active.size == 0:
            return active
        active.seal()
        segment = Segment.create(self.directory, self.log_end_offset, self.config.index_interval_bytes)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._new_segment = True
        return segment

    def flush_due(self) -> bool:
        """Whether flush.messages / flush.ms ask for a flush now."""
        cfg = self.config
        return ((cfg.flush_messages is not None and self._unflushed_messages >= cfg.flush_messages)
                or (cfg.flush_ms is not None and self._clock() - self._last_flush >= cfg.flush_ms))

    def flush(self) -> None:
        """fsync the batches appended so far (the .log files) and move the recovery point to the
        log end, in memory; write the checkpoint too if its interval has passed. Safe from any
        thread; appends go on during the fsyncs and wait for the next flush."""
        with self.flush_lock:
            self._flush(self.recovery_point, indexes=False)
            if self._clock() - self._checkpointed_at >= self.checkpoint_interval_ms:
                self._checkpoint()

    def checkpoint(self) -> None:
        """Flush, then write the recovery point to its file: from here on a crash recovers from it."""
        with self.flush_lock:
            self._checkpoint()

    def _checkpoint(self) -> None:
        started = self._clock()
        # Recovery trusts the indexes below the checkpoint and rebuilds the rest: fsync them first.
        self._flush(self.checkpointed, indexes=True)
        with self.lock:
            if self.closed:  # deleted meanwhile
                return
            if self.recovery_point != self.checkpointed or not (self.directory / RECOVERY_POINT).exists():
                write_offset_file(self.directory / RECOVERY_POINT, self.recovery_point)
                self.checkpointed = self.recovery_point
            self._checkpointed_at = started

    def _flush(self, since: int, indexes: bool) -> None:
        """fsync the segments from the one holding offset ``since`` on; their indexes too if ``indexes``."""
        pending: list[SegmentFlush] = []
        new_segment = False
        try:
            with self.lock:
                if self.closed:
                    return
                end, unflushed, started = self.log_end_offset, self._unflushed_messages, self._clock()
                new_segment, self._new_segment = self._new_segment, False
                first = max(bisect_right(self._bases, since) - 1, 0)
                for segment in self._segments[first:]:
                    pending.append(segment.prepare_flush(indexes))
            for segment_flush in pending:
                segment_flush.sync()
            if new_segment:  # a rolled segment's file names must survive a crash as its bytes do (as Kafka)
                fsync_directory(self.directory)
        except OSError:
            for segment_flush in pending:
                segment_flush.undo()   # a no-op for those synced
            self._new_segment |= new_segment
            if self.closed:  # deleted meanwhile: its directory is gone
                return
            raise
        with self.lock:
            if self.closed:  # deleted meanwhile
                return
            self.recovery_point = end
            self._unflushed_messages -= unflushed
            self._last_flush = started

    # --- reading ---------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, min_one: bool = True, upto: int | None = None) -> bytes:
        """Whole batches from the one containing ``offset``, up to ``max_bytes``; at least one
        batch if ``min_one``, as Kafka allows only the first partition of a fetch (KIP-74).
        With ``upto`` (a read_committed reader's last stable offset), none at or past it."""
        if upto is None or upto >= self.log_end_offset:
            return self._read(offset, max_bytes, min_one)   # no batch walk: what most fetches are
        return self.read_batches(offset, max_bytes, min_one, upto).records

    def read_batches(self, offset: int, max_bytes: int, min_one: bool = True, upto: int | None = None,
                     enough: int | None = None) -> BatchesRead:
        """As ``read``, with each batch's position and header, and the offset up to which the read
        has seen every record there is (the log holds none between the last batch and ``upto``).
        With ``enough``, no batch past the first that starts at or after it (Segment.read)."""
        data = self._read(offset, max_bytes, min_one, enough)
        upto = self.log_end_offset if upto is None else upto
        batches, end, next_offset = [], 0, offset
        for pos, header in iter_batches(data, validate=False):
            if header.base_offset >= upto:
                next_offset = upto
                break
            batches.append((pos, header))
            end, next_offset = pos + header.size, header.last_offset + 1
        return BatchesRead(data[:end], batches, next_offset)

    def _read(self, offset: int, max_bytes: int, min_one: bool, enough: int | None = None) -> bytes:
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside the log [{self.log_start_offset}, {self.log_end_offset}]")
        with self.lock:
            first = bisect_right(self._bases, offset) - 1
            for segment in self._segments[max(first, 0):]:
                data = segment.read(offset, max_bytes, min_one, enough)
                if data is not None:
                    return data
            return b""

    def batches(self, start: int, chunk_bytes: int = 1 << 20,
                upto: int | None = None) -> Iterator[tuple[bytes, int, BatchHeader]]:
        """The batches holding offsets ``start`` and after (with ``upto``, none at or past it), read a
        chunk at a time and not validated: (chunk, the batch's position in it, its header). Raises
        CorruptRecordError where the batches' framing is broken."""
        offset = start
        while offset < (self.log_end_offset if upto is None else min(upto, self.log_end_offset)):
            chunk = self.read(offset, chunk_bytes)
            if not chunk:
                return
            for pos, header in iter_batches(chunk, validate=False):
                if upto is not None and header.base_offset >= upto:
                    return
                if header.last_offset >= offset:
                    yield chunk, pos, header
                offset = header.last_offset + 1

    def records(self, start: int, upto: int | None = None, committed: bool = False,
                unreadable: Callable[[BatchHeader, CorruptRecordError], None] | None = None) -> Iterator[Record]:
        """The records at ``start`` and after, in offset order, control batches skipped; with ``upto``,
        none at or past it. ``committed``: a read_committed reader's view (``upto`` its last stable
        offset), the records of aborted transactions skipped too. A batch whose records cannot be
        decoded raises CorruptRecordError, or with ``unreadable`` is handed to it and skipped."""
        end = self.log_end_offset if upto is None else upto
        aborted = self.aborted_txns.between(start, end) if committed else []
        for chunk, pos, header in self.batches(start, upto=upto):
            if header.is_control or is_aborted(header, aborted):
                continue
            try:
                records = decode_records(chunk, pos)[1]
            except CorruptRecordError as exc:
                if unreadable is None:
                    raise
                unreadable(header, exc)
                continue
            yield from (r for r in records if r.offset >= start)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp >= ``timestamp``, or None."""
        with self.lock:
            first = max(bisect_right(self._bases, self.log_start_offset) - 1, 0)
            for segment in self._segments[first:]:
                found = segment.find_timestamp(timestamp, self.log_start_offset)
                if found:
                    return found
            return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp from the log start on,
        or None for an empty log: ListOffsets' MAX_TIMESTAMP (KIP-734)."""
        with self.lock:
            start = self.log_start_offset
            first = max(bisect_right(self._bases, start) - 1, 0)
            live = self._segments[first:]
            top = max((s.max_timestamp for s in live), default=NO_TIMESTAMP)
            straddling = live[0] if live and live[0].offset_of_max_timestamp < start else None
        if straddling is not None:
            # the first segment's largest timestamp is a deleted record's: what counts there is its batches
            # from the log start on (of a batch cut by the log start, the records past it)
            top = max((s.max_timestamp for s in live[1:]), default=NO_TIMESTAMP)
            for chunk, pos, header in self.batches(start):
                if header.base_offset >= straddling.next_offset:
                    break
                if header.base_offset < start:
                    top = max([top, *(r.timestamp for r in decode_records(chunk, pos)[1] if r.offset >= start)])
                else:
                    top = max(top, header.max_timestamp)
        return None if top == NO_TIMESTAMP else self.offset_for_timestamp(top)

    # --- deleting and rewriting closed segments (retention, DeleteRecords, the cleaner) ------

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: make ``offset`` the log start offset; returns the new log start offset.

        Segments wholly below it go at once unless the cleaner holds this log, else at the
        next retention pass; their records are unreadable from now on either way."""
        with self.lock:
            if offset < 0 or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is outside the log [{self.log_start_offset}, {self.log_end_offset}]")
            if offset > self.log_start_offset:
                if self.active_segment.next_offset <= offset:
                    self.roll()  # so the whole old active segment can go
                self._set_log_start_offset(offset)
        if self.maintenance_lock.acquire(blocking=False):
            try:
                self.delete_oldest_segments(len(self.segments_below_log_start()))
            finally:
                self.maintenance_lock.release()
        return self.log_start_offset

    def segments_below_log_start(self) -> list[Segment]:
        with self.lock:
            return [s for s in self._segments[:-1] if s.next_offset <= self.log_start_offset]

    def _set_log_start_offset(self, offset: int) -> None:
        write_offset_file(self.directory / LOG_START_OFFSET, offset, durable=True)
        self.log_start_offset = offset
        if self._columns is not None:
            self._columns.start[self._slot] = offset
        self.aborted_txns.truncate_before(offset)

    def delete_oldest_segments(self, count: int) -> int:
        """Delete the ``count`` oldest segments (never the active one), moving the log start past them."""
        with self.lock:
            count = min(count, len(self._segments) - 1)
            if count <= 0:
                return 0
            doomed, self._segments = self._segments[:count], self._segments[count:]
            self._bases = self._bases[count:]
            if self._segments[0].base_offset > self.log_start_offset:
                self._set_log_start_offset(self._segments[0].base_offset)
            for segment in doomed:
                segment.delete()
            return count

    def closed_segments(self) -> list[Segment]:
        with self.lock:
            return self._segments[:-1]

    def replace_segment(self, old: Segment, new: Segment) -> None:
        """Swap in the cleaner's rewrite of a closed segment (same base offset, written as ``.swap``)."""
        with self.lock:
            i = self._segments.index(old)
            old.close()
            new.rename("")  # over the old files, the .log last
            fsync_directory(self.directory)
            if new.size == 0 and i > 0:  # nothing left: drop the file, keep the first one as the log's start
                new.delete()
                del self._segments[i], self._bases[i]
            else:
                self._segments[i] = new

    def drop_segment(self, old: Segment) -> None:
        """Delete a closed segment the cleaner left without a record (never the first: it holds the
        log's start). Its offsets stay taken: the next segment's base is past them."""
        with self.lock:
            i = self._segments.index(old)
            del self._segments[i], self._bases[i]
            old.delete()

    def set_cleaner_checkpoint(self, offset: int) -> None:
        write_offset_file(self.directory / CLEANER_CHECKPOINT, offset)
        self.cleaner_checkpoint = offset

    def update_config(self, config: LogConfig) -> None:
        with self.lock:
            self.config = config
            self.active_segment.index_interval_bytes = config.index_interval_bytes

    # --- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        with self.flush_lock, self.maintenance_lock, self.lock:
            if self.closed:
                return
            self.active_segment.seal()
            self._checkpoint()
            for segment in self._segments:
                segment.close()
            self.closed = True
            (self.directory / CLEAN_SHUTDOWN).touch()

    def delete(self) -> None:
        """Close and remove the directory (renamed first, so a crash never leaves a half-deleted log)."""
        with self.maintenance_lock, self.lock:
            for segment in self._segments:
                segment.release()
            self.closed = True
        doomed = self.directory.with_name(uuid.uuid4().hex + DELETED)  # short: any topic name fits
        os.replace(self.directory, doomed)
        shutil.rmtree(doomed)
