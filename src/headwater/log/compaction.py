"""One compaction of one log's cleanable segments into ``.cleaned`` files: the log cleaner's
work, as a function of a picklable job, so it runs in the cleaner's worker process (or
in-process) on files nobody else writes. Swapping the results in is the broker's
(cleaner.py).

1. The offset map: each key in the dirty part to its latest offset.
2. Each cleanable segment rewritten: a record is kept unless a later offset of its key is in
   the map; a tombstone (null value) is also dropped once older than the tombstone horizon;
   records without a key are always kept; records of aborted transactions are removed; a
   transaction marker goes like a tombstone once no record of its transaction is left.
   Kept records keep their offsets. A batch that keeps every record is copied byte for byte;
   one that loses records keeps its header fields and the kept records' bytes as they were
   (see ``records.with_records``), compressed again with its codec.

Records are read through aiokafka's compiled reader, into a dict insert or a comparison
each; a batch it cannot parse is opened by ``decode_records``, which says what is wrong.
Every byte read and written goes through the throttle.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka.errors import CorruptRecordException

from headwater.records import BatchHeader, Record, decode_records
from headwater.records.decoding import compiled_records, record_boundaries
from headwater.records.encoding import with_records
from headwater.records.layout import ATTR_LOG_APPEND_TIME, MESSAGE_MAX_BYTES, records_section, uncompressed_bound

from .layout import CLEANED, SEGMENT_SUFFIXES, segment_file
from .segment import BatchInfo, Segment
from .throttle import Throttle, Unthrottled
from .txn_index import AbortedTxn

WRITE_CHUNK = 1 << 20  # cleaned batches are written to the new segment in chunks of about this size


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


@dataclass(frozen=True)
class SegmentToClean:
    base_offset: int
    next_offset: int


@dataclass(frozen=True)
class CleanJob:
    """What the worker needs to clean one log: plain values only (it crosses a process boundary)."""
    directory: Path
    segments: list[SegmentToClean]     # the cleanable section, in offset order
    first_dirty: int                   # the map covers records from here on
    tombstone_horizon: int             # tombstones and empty markers older than this go
    aborted: list[AbortedTxn]
    index_interval_bytes: int
    max_message_bytes: int             # bounds what a batch may decompress to


class WorkerDied(Exception):
    """The process cleaning a log ended before answering (killed): the pass is dropped, and a
    later one starts over."""


class CleanerStopped(WorkerDied):
    """The cleaner's worker was stopped with the broker: the pass ends, and no other follows."""


@dataclass
class CleanResult:
    stats: CleanerStats
    cleaned: list[int] = field(default_factory=list)   # base offsets of the segments with a .cleaned rewrite
    emptied: list[int] = field(default_factory=list)   # base offsets of the segments with no record left
    markers_removed: set[int] = field(default_factory=set)       # offsets of removed transaction markers


def compact(job: CleanJob, throttle: Throttle | Unthrottled = Unthrottled()) -> CleanResult:
    """Write the ``.cleaned`` rewrite of every segment of ``job`` that changes."""
    segments = []
    for s in job.segments:
        segment = Segment(job.directory, s.base_offset, job.index_interval_bytes)  # a read-only view: no index needed
        segment.next_offset = s.next_offset
        segments.append(segment)
    try:
        aborted = Aborted(job.aborted)
        reader = BatchReader(job.max_message_bytes, throttle)
        offset_map = OffsetMap().build([s for s in segments if s.next_offset > job.first_dirty], job.first_dirty,
                                       aborted, reader)
        result = CleanResult(CleanerStats(logs_cleaned=1))
        markers = Markers()
        for i, segment in enumerate(segments):
            # The log's first segment stays, even empty: it holds the log's start.
            rewrite = write_cleaned(segment, offset_map, job.tombstone_horizon, result.stats, aborted, markers, reader,
                                    keep_empty=i == 0)
            if rewrite is EMPTIED:
                result.emptied.append(segment.base_offset)
            elif rewrite is not None:
                rewrite.release()
                result.cleaned.append(segment.base_offset)
        result.markers_removed = markers.removed
        return result
    finally:
        for segment in segments:
            segment.release()


class BatchReader:
    """The batches of a closed segment, and their records, with every byte counted by the throttle."""

    def __init__(self, max_message_bytes: int = MESSAGE_MAX_BYTES, throttle: Throttle | Unthrottled = Unthrottled()):
        self.max_message_bytes = max_message_bytes
        self.throttle = throttle

    def batches(self, segment: Segment) -> Iterator[tuple[BatchHeader, bytes]]:
        for position, header in segment.iter_headers(0):
            raw = segment.batch_at(position, header.size)
            self.throttle.observe(len(raw))
            yield header, raw

    def bound(self, header: BatchHeader) -> int:
        """The most this batch's records may decompress to."""
        return uncompressed_bound(header, self.max_message_bytes)

    def body(self, header: BatchHeader, raw: bytes):
        return records_section(raw, 0, header, self.bound(header))

    def records(self, header: BatchHeader, raw: bytes, body) -> list:
        """The records, each with ``offset`` the delta from the batch's base offset, ``timestamp``,
        ``key`` and ``value``."""
        try:
            return list(compiled_records(body, header))
        except (CorruptRecordException, IndexError, UnicodeDecodeError, OverflowError, MemoryError):
            # decode_records raises what is wrong; or opens what the compiled reader would not
            # (a header key that is not UTF-8, say), as relative offsets.
            base = header.base_offset
            return [Record(r.offset - base, r.timestamp, r.key, r.value)
                    for r in decode_records(raw, 0, self.bound(header))[1]]


class Aborted:
    """Which transactional batches belong to aborted transactions: their records are removed,
    and never count as a key's latest value."""

    def __init__(self, entries: list[AbortedTxn]):
        self._by_producer: dict[int, list[AbortedTxn]] = {}
        for entry in entries:
            self._by_producer.setdefault(entry.producer_id, []).append(entry)

    def __contains__(self, header) -> bool:
        if not header.is_transactional or header.is_control:
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
        if header.is_transactional:
            self._with_records.add(header.producer_id)

    def ends_empty(self, header) -> bool:
        """Whether the transaction this marker ends has no record left."""
        if header.producer_id in self._with_records:
            self._with_records.discard(header.producer_id)
            return False
        return True


class OffsetMap:
    """Each key of the dirty part to its latest offset. Of each batch the map read whole it
    also notes whether that batch holds a record without a key or a tombstone: if not, the
    latest offsets in its range tell which of its records stay, and it need not be read again."""

    def __init__(self, latest: dict[bytes, int] | None = None):
        self.latest: dict[bytes, int] = {} if latest is None else latest
        self.plain: set[int] = set()   # base offsets of mapped batches with only keyed, non-null records
        self._kept: list[int] = []     # the latest offsets, sorted

    def build(self, segments: list[Segment], first_dirty: int, aborted: Aborted, reader: BatchReader) -> OffsetMap:
        latest = self.latest
        for segment in segments:
            for header, raw in reader.batches(segment):
                if header.is_control:
                    decode_records(raw, 0, reader.bound(header))  # a marker the cleaner cannot read: uncleanable
                    continue
                if header.last_offset < first_dirty or header in aborted:
                    continue
                base = header.base_offset
                first, plain = first_dirty - base, first_dirty <= base  # plain: only if the map reads it whole
                for record in reader.records(header, raw, reader.body(header, raw)):
                    key = record.key
                    if key is None or record.value is None:
                        plain = False
                    if key is not None and record.offset >= first:
                        latest[key] = base + record.offset
                if plain:
                    self.plain.add(base)
        self._kept = sorted(latest.values())
        return self

    def kept_in(self, header: BatchHeader) -> int | None:
        """How many records of the batch stay, if the map knows without reading it; else None."""
        if header.base_offset not in self.plain:
            return None
        return bisect_right(self._kept, header.last_offset) - bisect_left(self._kept, header.base_offset)


class Emptied:
    """A segment with no record left: it goes, no rewrite needed."""


EMPTIED = Emptied()


def write_cleaned(segment: Segment, offset_map: OffsetMap, tombstone_horizon: int, stats: CleanerStats,
                  aborted: Aborted = NOTHING_ABORTED, markers: Markers | None = None,
                  reader: BatchReader | None = None, keep_empty: bool = True) -> Segment | Emptied | None:
    """Write the cleaned copy of ``segment`` as ``.cleaned`` files, fsynced; None if nothing in it
    changes; EMPTIED, and nothing written, if no record is left and not ``keep_empty``."""
    reader = reader or BatchReader()
    output: Segment | None = None
    pending, infos, removed_before = bytearray(), [], stats.records_removed
    try:
        for header, raw in reader.batches(segment):
            stats.bytes_read += len(raw)
            batch = raw
            if header.is_control:
                if markers is not None and markers.ends_empty(header):
                    if header.max_timestamp < tombstone_horizon:
                        batch = b""
                        stats.records_removed += header.records_count
                        markers.removed.add(header.base_offset)
                    else:
                        stats.tombstones_kept += 1   # due later: the pass that removes it gets scheduled
            else:
                batch, kept = _cleaned_batch(header, raw, offset_map, tombstone_horizon, stats, aborted, reader)
                if kept and markers is not None:
                    markers.kept(header)
            if batch:
                infos.append(BatchInfo(len(pending), header.base_offset, header.last_offset, header.max_timestamp,
                                       len(batch)))
                pending += batch
            if len(pending) >= WRITE_CHUNK:
                output = output or _fresh_rewrite(segment)
                output.append(pending, infos)
                reader.throttle.observe(len(pending))
                pending, infos = bytearray(), []
    except BaseException:
        if output is not None:
            output.delete()  # a half-written rewrite of a segment the cleaner cannot read through
        raise
    if stats.records_removed == removed_before:
        if output is not None:
            output.delete()
        return None
    if output is None and not pending and not keep_empty:
        return EMPTIED
    output = output or _fresh_rewrite(segment)
    if pending:
        output.append(pending, infos)
        reader.throttle.observe(len(pending))
    output.next_offset = segment.next_offset  # offsets past the last kept record stay taken
    output.seal()
    output.flush()
    stats.bytes_written += output.size
    return output


def _fresh_rewrite(segment: Segment) -> Segment:
    """An empty ``.cleaned`` rewrite of ``segment``: what a killed pass left there goes first."""
    for suffix in SEGMENT_SUFFIXES:
        segment_file(segment.directory, segment.base_offset, suffix + CLEANED).unlink(missing_ok=True)
    return Segment.create(segment.directory, segment.base_offset, segment.index_interval_bytes, CLEANED)


def _cleaned_batch(header: BatchHeader, raw: bytes, offset_map: OffsetMap, tombstone_horizon: int,
                   stats: CleanerStats, aborted: Aborted, reader: BatchReader) -> tuple[bytes, int]:
    """The batch with only the records it keeps (``raw`` itself if all), and how many it keeps."""
    count = 0 if header in aborted else offset_map.kept_in(header)
    if count == 0 or count == header.records_count:
        stats.records_removed += header.records_count - count
        return (raw if count else b""), count
    latest = offset_map.latest
    body = reader.body(header, raw)
    records = reader.records(header, raw, body)
    base, log_append_time = header.base_offset, header.attributes & ATTR_LOG_APPEND_TIME
    kept: list[int] = []   # indexes of the records kept
    max_timestamp = -1
    for index, record in enumerate(records):
        key = record.key
        if key is not None:
            offset = base + record.offset
            if offset < latest.get(key, offset):
                continue
            if record.value is None:
                timestamp = header.max_timestamp if log_append_time else record.timestamp
                if timestamp < tombstone_horizon:
                    continue
                stats.tombstones_kept += 1
        kept.append(index)
        max_timestamp = max(max_timestamp, record.timestamp)
    stats.records_removed += len(records) - len(kept)
    if len(kept) == len(records):
        return raw, len(kept)
    if not kept:
        return b"", 0
    spans = record_boundaries(body, len(records))
    kept_body = b"".join(body[spans[i]:spans[i + 1]] for i in kept)
    return with_records(header, kept_body, len(kept),
                        header.max_timestamp if log_append_time else max_timestamp), len(kept)

