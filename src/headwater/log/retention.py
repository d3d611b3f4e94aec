"""Retention: which old segments a log may delete (cleanup.policy=delete).

Only whole closed segments go, oldest first, never the active one, so the log stays a
contiguous run of offsets whose start moves forward. A segment expires by time when its
largest record timestamp is older than ``retention.ms``; by size while the log without it
is still at least ``retention.bytes``. Segments wholly below the log start offset (moved
by DeleteRecords) go whatever the policy.
"""
from __future__ import annotations

from .partition import Log


def deletable_segment_count(log: Log, now_ms: int) -> int:
    """How many of the oldest segments retention deletes now."""
    config = log.config
    closed = log.closed_segments()
    count = len(log.segments_below_log_start())
    if config.delete and config.retention_ms >= 0:
        while count < len(closed) and now_ms - closed[count].max_timestamp > config.retention_ms:
            count += 1
    if config.delete and config.retention_bytes >= 0:
        excess = log.size_bytes - config.retention_bytes - sum(s.size for s in closed[:count])
        while count < len(closed) and excess - closed[count].size >= 0:
            excess -= closed[count].size
            count += 1
    return count


def enforce_retention(log: Log, now_ms: int) -> int:
    """Delete the segments retention allows; returns how many went."""
    with log.maintenance_lock:
        if log.closed:
            return 0
        return log.delete_oldest_segments(deletable_segment_count(log, now_ms))
