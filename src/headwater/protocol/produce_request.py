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

from headwater.protocol.body_reader import BodyReader

MIN_VERSION, MAX_VERSION = 3, 8
_SETTINGS = struct.Struct(">hi")   # acks, timeout
_PARTITION = struct.Struct(">ii")  # index, the records' size (-1: null)


class PartitionProduceData:
    __slots__ = ("index", "records")

    def __init__(self, index: int, records: bytes | memoryview | None) -> None:
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
    read = BodyReader(body)
    transactional_id = read.nullable_string()
    acks, timeout_ms = read.unpack(_SETTINGS)
    topic_data = []
    for _ in range(read.count("topic_data")):
        name = read.string("topic_data.name")
        partition_data = []
        for _ in range(read.count("topic_data.partition_data")):
            index, size = read.unpack(_PARTITION)
            # a view of the request's bytes, not a copy: validate copies them once, into the buffer the log
            # stamps (a frame is bytes, so nothing can change under the view)
            partition_data.append(PartitionProduceData(index, None if size < 0 else read.take(size)))
        topic_data.append(TopicProduceData(name, partition_data))
    return ProduceRequest(transactional_id, acks, timeout_ms, topic_data)
