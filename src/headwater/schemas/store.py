"""The registry's storage: the compacted ``_schemas`` topic (Confluent's name for it), written
through the broker's append path like its coordinators' internal topics, so it is validated,
fetched and compacted as any other log. Records are JSON keys and values; ``read`` follows the
log from where it last stopped, so a restart replays it all and a record some other writer
appended is applied too (one that does not parse is skipped with a warning)."""
from __future__ import annotations

import json
import logging
from collections.abc import Iterator

from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.internal_topic import TOPIC_CONFIGS, InternalTopic, json_bytes, replay
from headwater.schemas.registry import StorageUnavailable

logger = logging.getLogger("headwater.schemas")
SCHEMAS_TOPIC = "_schemas"
RECORD_FRAMING = 4096   # a record's key, its value's other fields and the batch around them


def max_schema_bytes(message_max_bytes: int) -> int:
    """The longest schema (as its record carries it, JSON-escaped) a _schemas record can hold."""
    return message_max_bytes - RECORD_FRAMING


class SchemasTopic:
    def __init__(self, appender: Appender, clock: Clock):
        self._logs = appender.log_manager
        self._topic = InternalTopic(SCHEMAS_TOPIC, appender, clock)
        self._next_offset = 0

    def write(self, pairs: list[tuple[dict, dict | None]]) -> None:
        if SCHEMAS_TOPIC not in self._logs.topics:   # an operator deleted it: made again, compacted
            self._logs.create_topic(SCHEMAS_TOPIC, 1, TOPIC_CONFIGS)
        error = self._topic.write([(json_bytes(key), None if value is None else json_bytes(value))
                                   for key, value in pairs])
        if error:
            raise StorageUnavailable(f"cannot write to {SCHEMAS_TOPIC} ({error.name})")

    def read(self) -> Iterator[tuple[dict, dict | None]]:
        plog = self._logs.get_log(SCHEMAS_TOPIC, 0)
        if plog is None:
            return
        if plog.log_end_offset < self._next_offset:   # not the log read so far: deleted and made again
            self._next_offset = 0
        if plog.log_end_offset == self._next_offset:
            return
        end = plog.log_end_offset
        for record in replay(plog, SCHEMAS_TOPIC, self._next_offset):
            self._next_offset = record.offset + 1
            try:
                key = json.loads(record.key)
                value = None if record.value is None else json.loads(record.value)
            except (TypeError, ValueError, RecursionError) as exc:
                logger.warning("skipping unreadable record at offset %d of %s: %r", record.offset, SCHEMAS_TOPIC, exc)
                continue
            if isinstance(key, dict) and (value is None or isinstance(value, dict)):
                yield key, value
        self._next_offset = max(self._next_offset, end)  # past control batches too
