"""Dead letters (KIP-1191): a record a share group gives up on (rejected, or out of delivery
attempts) is written to the group's dead-letter topic, so nothing is dropped silently.

The dead letter carries where it came from in headers; with
``errors.deadletterqueue.copy.record.enable=true`` it also carries the record's key, value
and headers. Its partition is the source partition modulo the dead-letter topic's partitions.
"""
from __future__ import annotations

from headwater.log import Log
from headwater.records import Record, decode_records, iter_batches

HEADER_PREFIX = "__dlq.errors."


def find_record(plog: Log, offset: int) -> Record | None:
    """The record at ``offset``, or None if the log no longer holds it."""
    chunk = plog.read(offset, 1 << 20)
    for position, header in iter_batches(chunk, validate=False):
        if header.base_offset <= offset <= header.last_offset:
            return next((r for r in decode_records(chunk, position)[1] if r.offset == offset), None)
    return None


def dead_letter(source: Record | None, *, group_id: str, topic: str, partition: int, offset: int,
                delivery_count: int, message: str, copy_record: bool, now_ms: int) -> Record:
    headers = [(HEADER_PREFIX + name, value.encode()) for name, value in (
        ("topic", topic), ("partition", str(partition)), ("offset", str(offset)), ("group", group_id),
        ("delivery.count", str(delivery_count)), ("message", message))]
    if copy_record and source is not None:
        return Record(0, now_ms, source.key, source.value, source.headers + headers)
    return Record(0, now_ms, None, None, headers)
