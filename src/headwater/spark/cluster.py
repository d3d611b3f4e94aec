"""What the broker knows: topic-partitions and their earliest/latest offsets.

Talks plain Kafka protocol through librdkafka (Metadata, ListOffsets), so the same
code reads a Headwater broker or a Kafka cluster. Never joins a consumer group.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, TopicPartition

from headwater.spark.options import EARLIEST, LATEST, OffsetSpec, OptionError, Subscription

TIMEOUT_S = 30.0
# One try of an offset look-up. librdkafka keeps asking the leader its metadata names until a
# call's timeout, even one a Kafka cluster has fenced and replaced (a node lost); a Metadata
# request between tries is what shows it the new leader.
ATTEMPT_S = 2.0
T = TypeVar("T")

# Per-partition ListOffsets errors of a leadership change: the new leader is still taking over
# (Kafka marks each retriable; librdkafka hands them back per partition, unmarked).
MOVING_LEADER = frozenset({KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                           KafkaError.UNKNOWN_LEADER_EPOCH, KafkaError.FENCED_LEADER_EPOCH,
                           KafkaError.OFFSET_NOT_AVAILABLE, KafkaError.REPLICA_NOT_AVAILABLE})

# A partition is named by (topic, partition); offsets maps it to a Kafka offset.
TP = tuple[str, int]


def consumer(client: dict) -> Consumer:
    """A consumer for assign() only. librdkafka insists on a group.id even so; it is
    never joined and no offset is ever committed to it."""
    config = {
        "group.id": "headwater-spark",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
    }
    config.update(client)
    return Consumer(config)


class Cluster:
    """Metadata and offset look-ups for one query, on one client connection."""

    def __init__(self, client: dict):
        self._consumer = consumer(client)

    def close(self) -> None:
        self._consumer.close()

    def partitions(self, subscription: Subscription) -> list[TP]:
        """The topic-partitions the subscription covers now, sorted."""
        if subscription.assigned:
            return list(subscription.assigned)
        metadata = self._consumer.list_topics(timeout=TIMEOUT_S)
        if subscription.topics:
            # Naming a topic in Metadata makes brokers that auto-create topics create it,
            # as a Kafka consumer subscribing to it would.
            for topic in subscription.topics:
                if topic not in metadata.topics or metadata.topics[topic].error is not None:
                    metadata.topics.update(self._consumer.list_topics(topic, timeout=TIMEOUT_S).topics)
        found = []
        for name, topic in metadata.topics.items():
            if topic.error is None and not name.startswith("__") and subscription.matches(name):
                found.extend((name, p) for p in topic.partitions)
        return sorted(found)

    def watermarks(self, tp: TP) -> tuple[int, int]:
        """(log start offset, high watermark) of one partition."""
        try:
            low_high = self._retrying(
                lambda: self._consumer.get_watermark_offsets(TopicPartition(*tp), timeout=ATTEMPT_S))
        except KafkaException as e:
            raise RuntimeError(f"cannot list offsets of {tp[0]}-{tp[1]}: {e.args[0].str()}") from None
        if low_high is None:
            raise RuntimeError(f"timed out listing offsets of {tp[0]}-{tp[1]}")
        return low_high

    def earliest(self, tps) -> dict[TP, int]:
        return self._list_offsets(tps, OFFSET_BEGINNING)

    def latest(self, tps) -> dict[TP, int]:
        return self._list_offsets(tps, OFFSET_END)

    def at_timestamp(self, tps, timestamp_ms: int) -> dict[TP, int]:
        """First offset with a timestamp >= timestamp_ms, or the end if there is none."""
        found = self._list_offsets(tps, timestamp_ms)
        missing = [tp for tp, offset in found.items() if offset < 0]
        return {**found, **self.latest(missing)} if missing else found

    def _list_offsets(self, tps, timestamp_ms: int) -> dict[TP, int]:
        """One ListOffsets request per leader for all of `tps` (a watermark look-up would
        be two round trips per partition, and this runs on every micro-batch).
        OFFSET_BEGINNING and OFFSET_END are the protocol's earliest and latest."""
        if not tps:
            return {}
        query = [TopicPartition(t, p, timestamp_ms) for t, p in tps]

        def look_up() -> list[TopicPartition]:
            found = self._consumer.offsets_for_times(query, timeout=ATTEMPT_S)
            moving = next((tp.error for tp in found if tp.error is not None and tp.error.code() in MOVING_LEADER), None)
            if moving is not None:
                raise KafkaException(moving)
            return found

        try:
            found = self._retrying(look_up)
        except KafkaException as e:
            raise RuntimeError(f"cannot list offsets of {_names(tps)}: {e.args[0].str()}") from None
        for tp in found:
            if tp.error is not None:
                raise RuntimeError(f"cannot list offsets of {tp.topic}-{tp.partition}: {tp.error.str()}")
        return {(tp.topic, tp.partition): tp.offset for tp in found}

    def _retrying(self, look_up: Callable[[], T]) -> T:
        """`look_up()`, tried again after a metadata refresh until TIMEOUT_S has passed."""
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                return look_up()
            except KafkaException:
                if time.monotonic() + ATTEMPT_S > deadline:
                    raise
                self._consumer.list_topics(timeout=ATTEMPT_S)

    def resolve(self, spec: OffsetSpec, tps, name: str) -> dict[TP, int]:
        """Concrete offsets for `spec` on the given partitions."""
        if spec.kind == "earliest":
            return self.earliest(tps)
        if spec.kind == "latest":
            return self.latest(tps)
        if spec.kind == "timestamp":
            return self.at_timestamp(tps, spec.timestamp_ms)
        given = {}
        for tp in tps:
            topic, partition = tp
            if topic not in spec.offsets:
                raise OptionError(f"option '{name}' gives no offsets for topic {topic!r}")
            given[tp] = spec.offsets[topic].get(partition, EARLIEST if name == "startingOffsets" else LATEST)
        # -2 and -1 each in one request for all their partitions
        return {**given, **self.earliest([tp for tp, o in given.items() if o == EARLIEST]),
                **self.latest([tp for tp, o in given.items() if o == LATEST])}


def _names(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def to_json(offsets: dict[TP, int]) -> dict:
    """Checkpoint form: {"topic": {"0": 42}} with sorted keys (Spark compares offsets as JSON)."""
    result: dict = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json(offsets: dict) -> dict[TP, int]:
    return {(topic, int(p)): int(o) for topic, ps in offsets.items() for p, o in ps.items()}
