"""The broker's own compacted topics (``__consumer_offsets``, ``__share_group_state``,
``__transaction_state``): replaying them at start, every record in log order, whatever
cannot be read skipped with one log line, because nothing in these topics may stop the
broker from starting; and ``InternalTopic``, a coordinator's durable state as JSON keys and
values in one of them.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Iterator
from typing import Any, Callable

from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.fsync_rounds import settled
from headwater.log import Log, UnknownTopicError
from headwater.protocol.errors import ErrorCode
from headwater.records import CorruptRecordError, Record, encode_batch
from headwater.records.layout import HEADER_SIZE

logger = logging.getLogger("headwater.broker")
# Segments small enough that the cleaner gets closed ones to work on.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "segment.bytes": str(100 << 20)}
# Applies one replayed record: (key, value or None for a tombstone), parsed JSON; may raise on bad content.
Apply = Callable[[Any, Any], None]
# A record's most framing beyond its key and value (its length, offset delta, key and value
# lengths and header count as 5-byte varints, attributes, a 10-byte timestamp delta): a batch's
# size estimated from its records' keys and values is never below the real one.
RECORD_OVERHEAD = 5 * 5 + 1 + 10


def replay(plog: Log, topic: str, start: int = 0) -> Iterator[Record]:
    """The records from ``start`` (or the log start, if later) that the log holds when the replay
    begins, a batch that cannot be decoded skipped."""
    def skip(header, exc: CorruptRecordError) -> None:
        logger.warning("skipping unreadable batch at offset %d of %s: %s", header.base_offset, topic, exc)
    reached = max(start, plog.log_start_offset)
    try:
        for record in plog.records(reached, upto=plog.log_end_offset, unreadable=skip):
            reached = record.offset + 1
            yield record
    except CorruptRecordError as exc:  # the framing itself is gone: nothing after it can be found
        logger.error("replay of %s stops at offset %d: %s", topic, reached, exc)


def json_bytes(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


class InternalTopic:
    """One-partition compacted topic of JSON records keyed so that compaction keeps the latest
    state of each thing; a null value (tombstone) deletes the key."""

    def __init__(self, name: str, appender: Appender, clock: Clock):
        # the broker's own append path, so the internal log is validated and fetched like any other
        # topic's, and consumers waiting on it are woken; the clock stamps the records
        self.name, self.logs, self._appender, self._clock = name, appender.log_manager, appender, clock
        if name not in self.logs.topics:
            self.logs.create_topic(name, 1, TOPIC_CONFIGS)

    def write(self, pairs: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append (key, value) records in one batch, fsynced when the broker flushes every write."""
        error = self._append(pairs)
        if error or not pairs:
            return error
        if self._appender.fsyncs_each_write:
            try:
                self.logs.get_log(self.name, 0).flush()
            except OSError as exc:  # written, not durable: the client is told, and retries
                logger.error("cannot fsync %s: %s", self.name, exc)
                return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def write_unsynced(self, pairs: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        """Append (key, value) records in one batch without waiting for an fsync: the next fsync of
        the log (a durable write's, a flush) covers them; until then a machine crash can lose them."""
        return self._append(pairs)

    def write_durably(self, pairs: list[tuple[bytes, bytes | None]]) -> Awaitable[ErrorCode]:
        """``write``, its fsync awaited in the broker's group commit, off the event loop and shared
        with the other writes of the same round, rather than done on the event loop. The append
        and the fsync start at the call; await the result before answering."""
        error, fsync = self.write_then_fsync(pairs)
        return settled(error) if fsync is None else fsync

    def write_then_fsync(self, pairs: list[tuple[bytes, bytes | None]]
                         ) -> tuple[ErrorCode, Awaitable[ErrorCode] | None]:
        """``write_durably`` with the append's outcome known at the call, for a caller that must
        act on it before it awaits: (the append's error, the fsync to await, or None if there is
        nothing to wait for: the append refused, nothing written, or no fsync of each write)."""
        error = self._append(pairs)
        if error or not pairs or not self._appender.fsyncs_each_write:
            return error, None
        return error, self._synced(self._appender.fsync_rounds.join([self.logs.get_log(self.name, 0)]))

    async def _synced(self, fsync: Awaitable[dict]) -> ErrorCode:
        failed = await fsync
        if failed:   # written, not durable: the client is told, and retries
            logger.error("cannot fsync %s: %s", self.name, next(iter(failed.values())))
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return ErrorCode.NONE

    def _append(self, pairs: list[tuple[bytes, bytes | None]]) -> ErrorCode:
        now = self._clock.now_ms()
        for batch in self._batches(pairs, now):
            # encoded here, every record keyed: the own-batch path, which does not walk the records again
            result = self._appender.append(self.name, 0, batch, keyless=[])
            if result.error:
                logger.error("cannot write to %s: %s %s", self.name, result.error.name, result.message or "")
                return ErrorCode.COORDINATOR_NOT_AVAILABLE  # what Kafka answers when its state log refuses a write
        return ErrorCode.NONE

    def _batches(self, pairs: list[tuple[bytes, bytes | None]], now: int) -> list[bytes]:
        """The records in as few batches as the topic's max.message.bytes allows: a commit of
        thousands of offsets is larger in JSON than Kafka's binary records, and must not be refused
        for it. Each batch is whole; a crash between two leaves a prefix, which replays as a commit
        of fewer partitions (the client, never answered, commits again)."""
        limit = self.logs.get_log(self.name, 0).config.max_message_bytes
        chunks: list[list[Record]] = [[]]
        size = HEADER_SIZE
        for key, value in pairs:
            record_size = RECORD_OVERHEAD + len(key) + len(value or b"")
            if chunks[-1] and size + record_size > limit:
                chunks.append([])
                size = HEADER_SIZE
            chunks[-1].append(Record(len(chunks[-1]), now, key, value))
            size += record_size
        return [encode_batch(chunk) for chunk in chunks if chunk]

    def replay(self, apply: Apply) -> None:
        """Feed every record, oldest first, to ``apply`` as parsed JSON (key, value)."""
        plog = self.logs.get_log(self.name, 0)
        if plog is None:
            raise UnknownTopicError(self.name)
        for record in replay(plog, self.name):
            try:
                apply(json.loads(record.key), None if record.value is None else json.loads(record.value))
            except Exception as exc:  # noqa: BLE001 (bad JSON, Infinity, nesting too deep, wrong types: all skipped)
                logger.warning("skipping unreadable record at offset %d of %s: %r", record.offset, self.name, exc)
