"""The log cleaner: compaction of topics with cleanup.policy=compact (DDIA ch. 11, "Log compaction").

For one log, the cleanable section is the closed segments up to the first one holding a
record newer than ``min.compaction.lag.ms``; the active segment is never touched, and
segments from the first transaction still open on are not cleaned at all. Its dirty part
starts at the cleaner checkpoint (what the last pass covered). When the dirty bytes are at
least ``min.cleanable.dirty.ratio`` of the cleanable section (or kept tombstones fall due,
``delete.retention.ms`` after a pass kept them), a pass:

1. holds the log's maintenance lock (retention and DeleteRecords leave its closed segments
   alone meanwhile) and hands a ``compaction.CleanJob`` to the runner: the cleaner's worker
   process in the broker (``cleaner_worker``), or ``compaction.compact`` in-process; it
   writes a ``.cleaned`` rewrite of every segment that changes;
2. swaps each rewrite in crash-safely (see recovery.py): rename to ``.swap`` (the commit),
   then over the original under the log's lock, so readers see the old segment or the new.

If the runner fails (the worker was killed, say) the pass is dropped, its ``.cleaned`` files
deleted, and the next pass starts over. A log holding a batch that cannot be decoded is
marked uncleanable, as Kafka does (Kafka forgets it at a restart): logged once, counted in every pass's stats, skipped until
its ``cleaner-uncleanable`` file is deleted (it survives restarts: the data that failed is
still there); the other logs are still cleaned.
"""
from __future__ import annotations

import logging
import weakref
from collections.abc import Callable

from headwater.records import CorruptRecordError

from .compaction import (NOTHING_ABORTED, Aborted, BatchReader, CleanerStats, CleanerStopped, CleanJob, CleanResult,
                         Markers, OffsetMap, SegmentToClean, WorkerDied, compact, write_cleaned)
from .layout import CLEANED, SWAP, UNCLEANABLE, fsync_directory, replace_atomically
from .partition import Log
from .segment import Segment

__all__ = ["CleanerStats", "LogCleaner", "clean_log", "rewrite_segment"]

logger = logging.getLogger("headwater.log")

Runner = Callable[[CleanJob], CleanResult]


class LogCleaner:
    """Cleaning passes over many logs, and the ones it has marked uncleanable. ``run`` does the
    compaction: in-process unless the broker gives it its worker process."""

    def __init__(self, run: Runner = compact) -> None:
        self.run = run
        self.uncleanable: weakref.WeakKeyDictionary[Log, str] = weakref.WeakKeyDictionary()  # log -> why

    def clean(self, logs: list[Log], now_ms: int) -> CleanerStats:
        stats = CleanerStats()
        for log in logs:
            if not log.config.compact or self._set_aside(log):
                continue
            try:
                result = clean_log(log, now_ms, self.run)
            except CorruptRecordError as exc:
                self.uncleanable[log] = str(exc)
                replace_atomically(log.directory / UNCLEANABLE, str(exc), durable=False)
                logger.error("log cleaner: %s is uncleanable, skipped from now on: %s", log.directory.name, exc)
                continue
            except CleanerStopped:
                break   # the broker is stopping: the pass ends here, and nothing is left to say
            except WorkerDied as exc:
                logger.warning("log cleaner: %s; the next pass cleans it again", exc)
                continue
            if result:
                stats.add(result)
        stats.uncleanable_logs = len(self.uncleanable)
        return stats

    def _set_aside(self, log: Log) -> bool:
        """Whether ``log`` is uncleanable: marked in this run, or in an earlier one (its file)."""
        if log not in self.uncleanable:
            marked = log.directory / UNCLEANABLE
            try:
                self.uncleanable[log] = marked.read_text()
            except FileNotFoundError:
                return False
            logger.error("log cleaner: %s was set aside as uncleanable before, skipped: %s (delete %s to retry)",
                         log.directory.name, self.uncleanable[log], marked)
        return True


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


def clean_log(log: Log, now_ms: int, run: Runner = compact) -> CleanerStats | None:
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
        job = CleanJob(log.directory, [SegmentToClean(s.base_offset, s.next_offset) for s in segments], first_dirty,
                       now_ms - log.config.delete_retention_ms, list(log.aborted_txns.entries),
                       log.config.index_interval_bytes, log.config.max_message_bytes)
        try:
            result = run(job)
        except BaseException:
            _discard_cleaned(log)
            raise
        # In offset order, durably: the old values a removed tombstone deleted go before it does.
        cleaned, emptied, dropped = set(result.cleaned), set(result.emptied), False
        for segment in segments:
            if segment.base_offset in emptied:
                log.drop_segment(segment)
                dropped = True
            elif segment.base_offset in cleaned:
                if dropped:
                    fsync_directory(log.directory)
                    dropped = False
                rewrite, _ = Segment.open(log.directory, segment.base_offset, log.config.index_interval_bytes, None,
                                          CLEANED)
                rewrite.next_offset = segment.next_offset  # offsets past the last kept record stay taken
                commit(rewrite)
                log.replace_segment(segment, rewrite)
            else:
                continue
            result.stats.segments_rewritten += 1
        if result.markers_removed:
            with log.lock:  # the broker appends to the index under the same lock
                log.aborted_txns.forget_markers(result.markers_removed)
        log.set_cleaner_checkpoint(segments[-1].next_offset)
        # Kept tombstones are due by then even if nothing new makes the log dirty.
        log.tombstones_due_ms = now_ms + log.config.delete_retention_ms if result.stats.tombstones_kept else None
        return result.stats


def commit(rewrite: Segment) -> None:
    """Commit a ``.cleaned`` rewrite: from here on recovery finishes the swap rather than dropping it."""
    rewrite.rename(SWAP)  # the .log rename, last, commits the rewrite
    fsync_directory(rewrite.directory)


def _discard_cleaned(log: Log) -> None:
    """Delete the ``.cleaned`` files of a pass that failed (the runner writes nothing else)."""
    for leftover in log.directory.glob("*" + CLEANED):
        leftover.unlink(missing_ok=True)


def rewrite_segment(segment: Segment, latest: dict[bytes, int], tombstone_horizon: int,
                    stats: CleanerStats, aborted: Aborted = NOTHING_ABORTED,
                    markers: Markers | None = None) -> Segment | None:
    """Write the cleaned copy of ``segment`` and commit it as ``.swap`` files; None if nothing in
    it changes. The steps of a pass for one segment in one call, as the crash tests drive them."""
    rewrite = write_cleaned(segment, OffsetMap(latest), tombstone_horizon, stats, aborted, markers, BatchReader())
    if rewrite is not None:
        commit(rewrite)
    return rewrite
