"""Replaying the broker's own compacted topics (``__consumer_offsets``, ``__share_group_state``)
at start: every record in log order, whatever cannot be read skipped with one log line,
because nothing in these topics may stop the broker from starting."""
from __future__ import annotations

import logging
from collections.abc import Iterator

from headwater.log import Log
from headwater.records import CorruptRecordError, Record, decode_records, iter_batches

log = logging.getLogger("headwater.broker")
READ_CHUNK = 1 << 20


def replay(plog: Log, topic: str) -> Iterator[Record]:
    offset, end = plog.log_start_offset, plog.log_end_offset
    while offset < end:
        chunk = plog.read(offset, READ_CHUNK)
        if not chunk:
            return
        try:
            batches = list(iter_batches(chunk, validate=False))
        except CorruptRecordError as exc:  # the framing itself is gone: nothing after it can be found
            log.error("replay of %s stops at offset %d: %s", topic, offset, exc)
            return
        for pos, header in batches:
            offset = header.last_offset + 1
            if header.is_control:
                continue
            try:
                records = decode_records(chunk, pos)[1]
            except CorruptRecordError as exc:
                log.warning("skipping unreadable batch at offset %d of %s: %s", header.base_offset, topic, exc)
                continue
            yield from records
