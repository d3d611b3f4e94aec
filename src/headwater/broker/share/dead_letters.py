"""Dead letters (KIP-1191): a record a share group gives up on (rejected, or out of delivery
attempts) is written to the group's dead-letter topic, so nothing is dropped silently.

The dead letter carries where it came from in headers; with
``errors.deadletterqueue.copy.record.enable=true`` it also carries the record's key, value
and headers. Its partition is the source partition modulo the dead-letter topic's partitions.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from headwater.broker.appender import Appender
from headwater.log import Log
from headwater.records import Record, encode_batch

from .configs import GroupConfig

logger = logging.getLogger("headwater.broker")

HEADER_PREFIX = "__dlq.errors."


def find_record(plog: Log, offset: int) -> Record | None:
    """The record at ``offset``, or None if the log no longer holds it."""
    return next((r for r in plog.records(offset, upto=offset + 1) if r.offset == offset), None)


def dead_letter(source: Record | None, *, group_id: str, topic: str, partition: int, offset: int,
                delivery_count: int, message: str, copy_record: bool, now_ms: int) -> Record:
    headers = [(HEADER_PREFIX + name, value.encode()) for name, value in (
        ("topic", topic), ("partition", str(partition)), ("offset", str(offset)), ("group", group_id),
        ("delivery.count", str(delivery_count)), ("message", message))]
    if copy_record and source is not None:
        return Record(0, now_ms, source.key, source.value, source.headers + headers)
    return Record(0, now_ms, None, None, headers)


class DeadLetterWriter:
    """Writes the records share groups give up on to their dead-letter topics, through the
    broker's append path (the ShareCoordinator's ``dead_letter``)."""

    def __init__(self, appender: Appender, config_of: Callable[[str], GroupConfig]):
        self._appender, self._config_of = appender, config_of   # config_of: a share group's configs

    def __call__(self, group_id: str, topic: str, partition: int, offset: int, count: int, why: str) -> None:
        config = self._config_of(group_id)
        source = self._appender.log_manager.get_log(topic, partition)
        letter = dead_letter(
            find_record(source, offset) if source is not None else None, group_id=group_id, topic=topic,
            partition=partition, offset=offset, delivery_count=count, message=why,
            copy_record=config.get("errors.deadletterqueue.copy.record.enable") == "true", now_ms=int(time.time() * 1000))
        target = self._appender.topic_for_produce(config.dead_letter_topic)
        if target is None:
            logger.warning("share group %r: dead-letter topic %r does not exist; %s-%d@%d is archived without a dead letter",
                        group_id, config.dead_letter_topic, topic, partition, offset)
            return
        result = self._appender.append(target.name, partition % len(target.partitions), encode_batch([letter]))
        if result.error:
            logger.warning("share group %r: cannot write dead letter for %s-%d@%d: %s", group_id, topic, partition,
                        offset, result.message or result.error.name)
