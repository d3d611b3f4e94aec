"""Read-only views of the broker's state for the metrics and the console: topics, group lag,
records. Everything here runs on the event loop and reads what the broker holds in memory
(or, for records, its logs), so a scrape or a page costs no Kafka request."""
from __future__ import annotations

from dataclasses import dataclass

from headwater.broker.broker import Broker
from headwater.log import Log
from headwater.records import Record, decode_records, iter_batches

READ_CHUNK = 1 << 20  # bytes of batches read from a log at a time when browsing


@dataclass(frozen=True)
class PartitionOffsets:
    topic: str
    partition: int
    committed: int | None   # None: the group never committed this partition
    log_end: int

    @property
    def lag(self) -> int | None:
        # kafka_exporter's lag: log end minus committed, never negative (a log truncated under a commit)
        return None if self.committed is None else max(self.log_end - self.committed, 0)


def group_offsets(broker: Broker, group_id: str) -> list[PartitionOffsets]:
    """Committed offset, log end and lag of each partition the group committed, sorted."""
    rows = []
    for (topic, partition), committed in sorted(broker.groups.committed(group_id).items()):
        plog = broker.log_manager.get_log(topic, partition)
        if plog is not None:  # offsets of a deleted topic are not lag
            rows.append(PartitionOffsets(topic, partition, committed.offset, plog.log_end_offset))
    return rows


def records_from(plog: Log, offset: int, limit: int) -> list[Record]:
    """Up to ``limit`` records at or after ``offset`` (control batches skipped), in offset order."""
    found: list[Record] = []
    offset = max(offset, plog.log_start_offset)
    while len(found) < limit and offset < plog.log_end_offset:
        chunk = plog.read(offset, READ_CHUNK)
        if not chunk:
            break
        for pos, header in iter_batches(chunk, validate=False):
            if not header.is_control:
                found.extend(r for r in decode_records(chunk, pos)[1] if r.offset >= offset)
            offset = header.last_offset + 1
    return found[:limit]
