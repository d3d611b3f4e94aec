"""Produce requests v3–v8 (none of them flexible) decoded by hand, the hot path's twin of
kafka-python's generated ``ProduceRequest`` decoder and the null check after it.

librdkafka puts one partition in a produce request, so spread over many partitions a producer
sends a request per record or two, and the generated decoder's objects and the schema walk
that looks for nulls cost about as much as appending the record. The objects here carry the
generated class's field names, so a handler cannot tell them apart
(tests/protocol/test_produce_request.py decodes the same bodies both ways). A null where
Kafka's schema allows none, a negative count or a body cut short is a ``ValueError``; bytes
after the last field are ignored, as the generated decoder ignores them.
"""
from __future__ import annotations

import struct

MIN_VERSION, MAX_VERSION = 3, 8
_INT16, _INT32 = struct.Struct(">h"), struct.Struct(">i")
_SETTINGS = struct.Struct(">hi")   # acks, timeout


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records: bytes | None) -> None:
        self.index, self.records = index, records


class TopicProduceData:
    __slots__ = ("name", "partition_data")

    def __init__(self, name: str, partition_data: list[PartitionProduceData]) -> None:
        self.name, self.partition_data = name, partition_data


class ProduceRequest:
    __slots__ = ("transactional_id", "acks", "timeout_ms", "topic_data")

    def __init__(self, transactional_id: str | None, acks: int, timeout_ms: int,
                 topic_data: list[TopicProduceData]) -> None:
        self.transactional_id, self.acks, self.timeout_ms = transactional_id, acks, timeout_ms
        self.topic_data = topic_data


def decode_produce_request(body, version: int) -> ProduceRequest:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Produce v{version} requests are not decoded here")
    body = memoryview(body)
    transactional_id, pos = _string(body, 0, None)
    acks, timeout_ms = _SETTINGS.unpack_from(body, _within(body, pos, _SETTINGS.size))
    pos += _SETTINGS.size
    topics, pos = _count(body, pos, "topic_data")
    topic_data = []
    for _ in range(topics):
        name, pos = _string(body, pos, "topic_data.name")
        partitions, pos = _count(body, pos, "topic_data.partition_data")
        partition_data = []
        for _ in range(partitions):
            (index,) = _INT32.unpack_from(body, _within(body, pos, 4))
            (size,) = _INT32.unpack_from(body, _within(body, pos + 4, 4))
            pos += 8
            records = None if size < 0 else bytes(body[pos:_within(body, pos, size) + size])
            pos += max(size, 0)
            partition_data.append(PartitionProduceData(index, records))
        topic_data.append(TopicProduceData(name, partition_data))
    return ProduceRequest(transactional_id, acks, timeout_ms, topic_data)


def _within(body: memoryview, pos: int, size: int) -> int:
    """``pos``, when ``size`` bytes from there are in the body."""
    if pos + size > len(body):
        raise ValueError(f"the body ends at byte {len(body)}, a field runs to {pos + size}")
    return pos


def _count(body: memoryview, pos: int, what: str) -> tuple[int, int]:
    (n,) = _INT32.unpack_from(body, _within(body, pos, 4))
    if n < 0:
        raise ValueError(f"{what} is null, and the schema does not allow null there")
    return n, pos + 4


def _string(body: memoryview, pos: int, what: str | None) -> tuple[str | None, int]:
    """A string at ``pos`` and where it ends; null only where ``what`` (its path, to name it) is None."""
    (n,) = _INT16.unpack_from(body, _within(body, pos, 2))
    if n < 0 and what is not None:
        raise ValueError(f"{what} is null, and the schema does not allow null there")
    if n < 0:
        return None, pos + 2
    return str(body[pos + 2:_within(body, pos + 2, n) + n], "utf-8"), pos + 2 + n
