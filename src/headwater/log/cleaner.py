"""The log cleaner: compaction of topics with cleanup.policy=compact (DDIA ch. 11, "Log compaction").

For one log, the cleanable section is the closed segments up to the first one holding a
record newer than ``min.compaction.lag.ms``; the active segment is never touched. Its
dirty part starts at the cleaner checkpoint (what the last pass covered). When the dirty
bytes are at least ``min.cleanable.dirty.ratio`` of the cleanable section, a pass:

1. maps each key in the dirty part to its latest offset (the offset map);
2. rewrites every cleanable segment, keeping a record unless a later offset of its key is
   in the map; a tombstone (null value) is also dropped once older than
   ``delete.retention.ms``, so consumers have that long to see the delete (a pass runs
   when kept tombstones fall due, even if the log is not dirty). Kept records
   keep their offsets; a batch that loses records is re-encoded with its own codec,
   producer id/epoch/base sequence, attributes and last offset delta; untouched batches
   are copied byte for byte; records without a key are always kept; records of aborted
   transactions (the log's aborted index) are removed, and segments from the first
   transaction still open on are not cleaned at all; a transaction marker goes like a
   tombstone once no record of its transaction is left;
3. swaps each rewrite in crash-safely (see recovery.py): ``.cleaned`` files, fsync, rename
   to ``.swap``, then over the original under the log's lock.

A log holding a batch that cannot be decoded is marked uncleanable, as Kafka does: logged
once, counted in every pass's stats, skipped until the broker restarts; the other logs are
still cleaned.
"""
from __future__ import annotations

import logging
import weakref
from dataclasses import dataclass

from headwater.records import (ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, CorruptRecordError, decode_records, encode_batch,
                               reseal_crc, set_last_offset_delta, set_max_timestamp, set_partition_leader_epoch)

from .layout import CLEANED, SWAP, fsync_directory
from .partition import Log
from .segment import BatchInfo, Segment
from .txn_index import AbortedTxn

WRITE_CHUNK = 1 << 20  # cleaned batches are written to the new segment in chunks of about this size

logger = logging.getLogger("headwater.log")


@dataclass
class CleanerStats:
    logs_cleaned: int = 0
    segments_rewritten: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    tombstones_kept: int = 0
    uncleanable_logs: int = 0  # logs the cleaner has given up on (see LogCleaner)

    def add(self, other: CleanerStats) -> None:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class LogCleaner:
    """Cleaning passes over many logs, and the ones it has marked uncleanable."""

    def __init__(self) -> None:
        self.uncleanable: weakref.WeakKeyDictionary[Log, str] = weakref.WeakKeyDictionary()  # log -> why

    def clean(self, logs: list[Log], now_ms: int) -> CleanerStats:
        stats = CleanerStats()
        for log in logs:
            if not log.config.compact or log in self.uncleanable:
                continue
            try:
                result = clean_log(log, now_ms)
            except CorruptRecordError as exc:
                self.uncleanable[log] = str(exc)
                logger.error("log cleaner: %s is uncleanable, skipped from now on: %s", log.directory.name, exc)
                continue
            if result:
                stats.add(result)
        stats.uncleanable_logs = len(self.uncleanable)
        return stats


def cleanable_segments(log: Log, now_ms: int) -> list[Segment]:
    """The closed segments, up to the first holding a record too young to compact or a
    transaction still open."""
    horizon = now_ms - log.config.min_compaction_lag_ms
    unstable = log.first_unstable_offset
    out = []
    for segment in log.closed_segments():
        if segment.max_timestamp > horizon or (unstable is not None and segment.next_offset > unstable):
            break
        out.append(segment)
    return out


def clean_log(log: Log, now_ms: int) -> CleanerStats | None:
    """One cleaning pass over ``log`` if it is dirty enough; None when there was nothing to do."""
    with log.maintenance_lock:
        if log.closed:
            return None
        segments = cleanable_segments(log, now_ms)
        first_dirty = max(log.cleaner_checkpoint, log.log_start_offset)
        dirty = [s for s in segments if s.next_offset > first_dirty]
        total = sum(s.size for s in segments)
        dirty_enough = dirty and sum(s.size for s in dirty) >= log.config.min_cleanable_dirty_ratio * total
        tombstones_due = log.tombstones_due_ms is not None and now_ms >= log.tombstones_due_ms
        if not segments or not (dirty_enough or tombstones_due):
            return None
        aborted = Aborted(log.aborted_txns.entries)
        latest = build_offset_map(dirty, first_dirty, aborted)
        stats = CleanerStats(logs_cleaned=1)
        tombstone_horizon = now_ms - log.config.delete_retention_ms
        markers = Markers()
        for segment in segments:
            rewrite = rewrite_segment(segment, latest, tombstone_horizon, stats, aborted, markers)
            if rewrite is not None:
                log.replace_segment(segment, rewrite)
                stats.segments_rewritten += 1
        if markers.removed:
            with log.lock:  # the broker appends to the index under the same lock
                log.aborted_txns.forget_markers(markers.removed)
        log.set_cleaner_checkpoint(segments[-1].next_offset)
        # Kept tombstones are due by then even if nothing new makes the log dirty.
        log.tombstones_due_ms = now_ms + log.config.delete_retention_ms if stats.tombstones_kept else None
        return stats


def _batches(segment: Segment):
    """(header, records) of every batch in a closed segment."""
    for position, header in segment.iter_headers(0):
        yield decode_records(segment.batch_at(position, header.size))


class Aborted:
    """Which transactional batches belong to aborted transactions: their records are removed,
    and never count as a key's latest value."""

    def __init__(self, entries: list[AbortedTxn]):
        self._by_producer: dict[int, list[AbortedTxn]] = {}
        for entry in entries:
            self._by_producer.setdefault(entry.producer_id, []).append(entry)

    def __contains__(self, header) -> bool:
        if not header.attributes & ATTR_TRANSACTIONAL or header.attributes & ATTR_CONTROL:
            return False
        return any(a.covers(header.producer_id, header.base_offset) for a in self._by_producer.get(header.producer_id, ()))


NOTHING_ABORTED = Aborted([])


class Markers:
    """Transaction markers with no record of their transaction left (all aborted, or all
    compacted away): like tombstones, removed once older than delete.retention.ms, and their
    aborted-index entries with them, as Kafka's cleaner does. Segments are walked from the
    log's first, so every producer's transactions are seen whole."""

    def __init__(self) -> None:
        self._with_records: set[int] = set()   # producers with a kept transactional record since their last marker
        self.removed: set[int] = set()         # offsets of the markers removed in this pass

    def kept(self, header) -> None:
        if header.attributes & ATTR_TRANSACTIONAL:
            self._with_records.add(header.producer_id)

    def ends_empty(self, header) -> bool:
        """Whether the transaction this marker ends has no record left."""
        if header.producer_id in self._with_records:
            self._with_records.discard(header.producer_id)
            return False
        return True


def build_offset_map(segments: list[Segment], first_dirty: int, aborted: Aborted) -> dict[bytes, int]:
    latest: dict[bytes, int] = {}
    for segment in segments:
        for header, records in _batches(segment):
            if header.attributes & ATTR_CONTROL or header.last_offset < first_dirty or header in aborted:
                continue
            for record in records:
                if record.key is not None and record.offset >= first_dirty:
                    latest[record.key] = record.offset
    return latest


def rewrite_segment(segment: Segment, latest: dict[bytes, int], tombstone_horizon: int,
                    stats: CleanerStats, aborted: Aborted = NOTHING_ABORTED,
                    markers: Markers | None = None) -> Segment | None:
    """Write the cleaned copy of ``segment`` as ``.swap`` files; None if nothing in it changes."""
    output: Segment | None = None
    pending, infos, removed_before = bytearray(), [], stats.records_removed
    try:
        for position, header in segment.iter_headers(0):
            raw = segment.batch_at(position, header.size)
            stats.bytes_read += len(raw)
            batch = raw
            if header.attributes & ATTR_CONTROL:
                if markers is not None and markers.ends_empty(header):
                    if header.max_timestamp < tombstone_horizon:
                        batch = b""
                        stats.records_removed += header.records_count
                        markers.removed.add(header.base_offset)
                    else:
                        stats.tombstones_kept += 1   # due later: the pass that removes it gets scheduled
            else:
                _, records = decode_records(raw)
                kept = [] if header in aborted else [r for r in records
                                                     if _retained(r, header, latest, tombstone_horizon)]
                stats.records_removed += len(records) - len(kept)
                stats.tombstones_kept += sum(1 for r in kept if r.value is None and r.key is not None)
                batch = _reencode(header, kept) if len(kept) < len(records) else raw
                if kept and markers is not None:
                    markers.kept(header)
            if batch:
                infos.append(BatchInfo(len(pending), header.base_offset, header.last_offset, header.max_timestamp,
                                       len(batch)))
                pending += batch
            if len(pending) >= WRITE_CHUNK:
                output = output or Segment.create(segment.directory, segment.base_offset,
                                                  segment.index_interval_bytes, CLEANED)
                output.append(pending, infos)
                pending, infos = bytearray(), []
    except BaseException:
        if output is not None:
            output.delete()  # a half-written rewrite of a segment the cleaner cannot read through
        raise
    if stats.records_removed == removed_before:
        if output is not None:
            output.delete()
        return None
    output = output or Segment.create(segment.directory, segment.base_offset, segment.index_interval_bytes,
                                      CLEANED)
    if pending:
        output.append(pending, infos)
    output.next_offset = segment.next_offset  # offsets past the last kept record stay taken
    output.seal()
    output.flush()
    output.rename(SWAP)  # the .log rename, last, commits the rewrite
    fsync_directory(segment.directory)
    stats.bytes_written += output.size
    return output


def _retained(record, header, latest: dict[bytes, int], tombstone_horizon: int) -> bool:
    if record.key is None:
        return True
    if record.offset < latest.get(record.key, record.offset):
        return False
    if record.value is None:
        timestamp = header.max_timestamp if header.attributes & ATTR_LOG_APPEND_TIME else record.timestamp
        return timestamp >= tombstone_horizon
    return True


def _reencode(header, records) -> bytes:
    """The batch with only ``records``: same codec, producer fields, attributes, offset range."""
    if not records:
        return b""
    out = bytearray(encode_batch(records, base_offset=header.base_offset, compression=header.compression,
                                 producer_id=header.producer_id, producer_epoch=header.producer_epoch,
                                 base_sequence=header.base_sequence, attributes=header.attributes))
    # Keep what the producer and the log know the batch by: its epoch, last offset and max timestamp.
    set_partition_leader_epoch(out, 0, header.partition_leader_epoch)
    set_last_offset_delta(out, 0, header.last_offset_delta)
    if header.attributes & ATTR_LOG_APPEND_TIME:
        set_max_timestamp(out, 0, header.max_timestamp)
    reseal_crc(out)
    return bytes(out)
