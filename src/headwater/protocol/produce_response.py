"""Produce responses v3–v8 (the versions the broker serves, none of them flexible) encoded
straight to bytes, the hot path's twin of kafka-python's generated ``ProduceResponse``.

librdkafka puts one partition in a produce request, so at a few thousand partitions a
producer sends a request per record or two, and building the generated response's three
objects per partition and encoding them field by field was a fifth of what such a request
cost. Here a partition is a tuple, and one without record errors is one ``struct.pack``.
Any object with the generated ``PartitionProduceResponse``'s field names is accepted too
(the authorization rule answers denied topics with those), and
tests/protocol/test_produce_response.py holds the bytes equal to the generated encoder's.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey

_Generated = MESSAGE_CLASSES[ApiKey.PRODUCE][1]
MIN_VERSION, MAX_VERSION = 3, 8
_COUNT = struct.Struct(">i")
_NO_STRING = struct.pack(">h", -1)


class ProducedPartition(NamedTuple):
    """One partition of a Produce response, fields as Kafka's schema names them."""
    index: int
    error_code: int
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    record_errors: list   # of (batch_index, message or None), or objects with the generated field names
    error_message: str | None

    @classmethod
    def of(cls, partition) -> ProducedPartition:
        """A generated ``PartitionProduceResponse`` (or anything with its field names) as a tuple."""
        return cls(partition.index, partition.error_code, partition.base_offset, partition.log_append_time_ms,
                   partition.log_start_offset, partition.record_errors or [], partition.error_message)


class ProducedTopic:
    __slots__ = ("name", "partition_responses")

    def __init__(self, name: str, partition_responses: list) -> None:
        self.name, self.partition_responses = name, partition_responses


class ProduceResponse:
    """A Produce response body as the server frames it (``encode``), shaped like the generated
    class where the broker's other parts look: the authorization rule adds denied topics to
    ``responses``, quotas set ``throttle_time_ms``."""
    __slots__ = ("responses", "throttle_time_ms")
    TopicProduceResponse = _Generated.TopicProduceResponse

    def __init__(self, responses: list, throttle_time_ms: int = 0) -> None:
        self.responses, self.throttle_time_ms = responses, throttle_time_ms

    def encode(self, version: int) -> bytes:
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"Produce v{version} responses are not encoded here")
        head = _partition_heads[version]
        out = [_COUNT.pack(len(self.responses))]
        for topic in self.responses:
            out += (_string(topic.name), _COUNT.pack(len(topic.partition_responses)))
            for p in topic.partition_responses:
                if type(p) is not ProducedPartition:
                    p = ProducedPartition.of(p)
                out.append(head.pack(*p[:5]) if version >= 5 else head.pack(*p[:4]))
                if version >= 8:
                    out.append(_COUNT.pack(len(p.record_errors)))
                    for error in p.record_errors:
                        index, message = error if isinstance(error, tuple) else (
                            error.batch_index, error.batch_index_error_message)
                        out += (_COUNT.pack(index), _string(message))
                    out.append(_string(p.error_message))
        out.append(_COUNT.pack(self.throttle_time_ms))
        return b"".join(out)


def _string(text: str | None) -> bytes:
    if text is None:
        return _NO_STRING
    data = text.encode()
    return len(data).to_bytes(2, "big") + data


# Per version: a partition's fixed fields (index, error code, base offset, log append time, and
# from v5 the log start offset).
_partition_heads = {v: struct.Struct(">ihqq" + ("q" if v >= 5 else "")) for v in range(MIN_VERSION, MAX_VERSION + 1)}
