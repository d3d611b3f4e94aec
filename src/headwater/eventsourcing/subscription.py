"""Catch-up subscriptions: where a projection reads its events from, in batches, with a
checkpoint (JSON) that says where the next batch starts. From the store (by global
position) or from the topic the relay fills (by offset per partition)."""
from __future__ import annotations

import time
from typing import Any, Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from headwater.eventsourcing.events import RecordedEvent
from headwater.eventsourcing.row_formats import JsonRows, RowFormat
from headwater.eventsourcing.store import EventStore

Checkpoint = dict[str, Any]


class Source(Protocol):
    def batch(self, checkpoint: Checkpoint | None, size: int) -> tuple[list[RecordedEvent], Checkpoint, bool]:
        """Up to `size` events after `checkpoint`, the checkpoint after them, and whether
        that was everything there is for now."""


class StoreSource:
    def __init__(self, store: EventStore):
        self.store = store

    def batch(self, checkpoint, size):
        position = (checkpoint or {}).get("position", 0)
        events = self.store.read_all(position, size)
        after = {"position": events[-1].position} if events else {"position": position}
        return events, after, len(events) < size


class TopicSource:
    """The events topic, every partition, from the offsets in the checkpoint. The store
    still decodes each event (its keys decrypt personal fields, its upcasters apply)."""

    def __init__(self, store: EventStore, bootstrap: str, topic: str, poll_timeout: float = 1.0,
                 security: dict[str, str] | None = None, rows: RowFormat = JsonRows()):
        """``security``: librdkafka properties for a secured broker (security.protocol, sasl.*, ssl.*);
        ``rows``: the records' format, as the relay wrote them (`row_formats.row_format`)."""
        self.store, self.rows = store, rows
        self.topic = topic
        self.poll_timeout = poll_timeout
        self.consumer = Consumer({"bootstrap.servers": bootstrap, **(security or {}),
                                  "group.id": "headwater-projections",
                                  "enable.auto.commit": False, "enable.partition.eof": True})
        self._position: dict[str, int] | None = None  # where the consumer stands, per partition
        self._at_end: set[str] = set()

    def _seek(self, offsets: dict[str, int]) -> None:
        partitions = self.consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        self.consumer.assign([TopicPartition(self.topic, p, offsets.get(str(p), OFFSET_BEGINNING))
                              for p in sorted(partitions)])
        self._position = {str(p): offsets.get(str(p), 0) for p in partitions}
        self._at_end = set()

    def batch(self, checkpoint, size):
        wanted = (checkpoint or {}).get("offsets")
        if self._position is None or (wanted is not None and wanted != self._position):
            self._seek(wanted or {})
        events = []
        idle_since = time.monotonic()
        while len(events) < size and len(self._at_end) < len(self._position):
            # short waits: consume() returns early only with `size` messages, not at the partitions' ends
            messages = self.consumer.consume(size - len(events), timeout=0.05)
            if not messages:
                if time.monotonic() - idle_since > self.poll_timeout:
                    return events, {"offsets": dict(self._position)}, True  # nothing more for now
                continue
            idle_since = time.monotonic()
            for message in messages:
                partition = str(message.partition())
                if message.error():
                    if message.error().code() != KafkaError._PARTITION_EOF:
                        raise KafkaException(message.error())
                    self._at_end.add(partition)
                    continue
                self._at_end.discard(partition)
                events.append(self.store.decode_row(self.rows.decode(message.value())))
                self._position[partition] = message.offset() + 1
        return events, {"offsets": dict(self._position)}, len(self._at_end) == len(self._position)

    def close(self) -> None:
        self.consumer.close()
