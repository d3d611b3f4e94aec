"""ShareFetch responses (v1, the version the broker serves; flexible) encoded straight to bytes,
the hot path's twin of the generated ``ShareFetchResponse``.

A share consumer's every poll is one ShareFetch, and its response (the records, the runs of
offsets acquired) went through one generated object per partition, leader and acquired run,
then kafka-python's field-by-field encoder: a fifth of the broker's time per round. Here a
partition is a tuple and its fixed fields one ``struct.pack``. Any object with the generated
``PartitionData``'s field names is accepted too (the authorization rule answers denied topics
with those), and tests/protocol/test_share_fetch_response.py holds the bytes equal to the
generated encoder's.
"""
from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

VERSION = 1
_HEAD = struct.Struct(">ih")          # throttle time, error code
_INT32 = struct.Struct(">i")
_PARTITION = struct.Struct(">ih")     # partition index, error code
_ACK_ERROR = struct.Struct(">h")
_LEADER = struct.Struct(">iib")       # leader id, leader epoch, its (empty) tagged fields
_ACQUIRED = struct.Struct(">qqhb")    # first offset, last offset, delivery count, tagged fields
_NO_TAGS = b"\x00"


class SharePartitionData(NamedTuple):
    """One partition of a ShareFetch response, fields as Kafka's schema names them (the current
    leader flattened, the acquired records as (first offset, last offset, delivery count))."""
    partition_index: int
    error_code: int
    error_message: str | None
    acknowledge_error_code: int
    acknowledge_error_message: str | None
    leader_id: int
    leader_epoch: int
    records: bytes | None
    acquired_records: list[tuple[int, int, int]]

    @classmethod
    def of(cls, p) -> SharePartitionData:
        """A generated ``PartitionData`` (or anything with its field names) as a tuple."""
        return cls(p.partition_index, p.error_code, p.error_message, p.acknowledge_error_code,
                   p.acknowledge_error_message, p.current_leader.leader_id, p.current_leader.leader_epoch, p.records,
                   [(a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records])


class ShareFetchedTopic:
    __slots__ = ("topic_id", "partitions")

    def __init__(self, topic_id: uuid.UUID, partitions: list) -> None:
        self.topic_id, self.partitions = topic_id, partitions


class ShareFetchResponse:
    """A ShareFetch response body as the server frames it (``encode``), shaped like the
    generated class where the broker's other parts look (the authorization rule adds denied
    topics to ``responses``; quotas set ``throttle_time_ms``).

    The body is kept once encoded: the handler encodes it while the acknowledgements' fsync
    runs, and the server's encoding after the fsync is then free. Setting a field drops it
    (change a response by setting its fields, never by changing their lists in place)."""
    __slots__ = ("throttle_time_ms", "error_code", "error_message", "acquisition_lock_timeout_ms", "responses",
                 "node_endpoints", "_body")

    def __init__(self, throttle_time_ms: int, error_code: int, error_message: str | None,
                 acquisition_lock_timeout_ms: int, responses: list, node_endpoints: list) -> None:
        self.throttle_time_ms, self.error_code, self.error_message = throttle_time_ms, error_code, error_message
        self.acquisition_lock_timeout_ms, self.responses, self.node_endpoints = (acquisition_lock_timeout_ms, responses,
                                                                                 node_endpoints)

    def __setattr__(self, name: str, value) -> None:
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_body", None)

    def encode(self, version: int) -> bytes:
        if version != VERSION:
            raise ValueError(f"ShareFetch v{version} responses are not encoded here")
        if self._body is None:
            object.__setattr__(self, "_body", self._encoded())
        return self._body

    def _encoded(self) -> bytes:
        out = [_HEAD.pack(self.throttle_time_ms, self.error_code), _string(self.error_message),
               _INT32.pack(self.acquisition_lock_timeout_ms), _uvarint(len(self.responses) + 1)]
        for topic in self.responses:
            out.append(topic.topic_id.bytes)
            out.append(_uvarint(len(topic.partitions) + 1))
            for p in topic.partitions:
                if type(p) is not SharePartitionData:
                    p = SharePartitionData.of(p)
                index, error, message, ack_error, ack_message, leader_id, leader_epoch, records, acquired = p
                out += (_PARTITION.pack(index, error), _string(message), _ACK_ERROR.pack(ack_error),
                        _string(ack_message), _LEADER.pack(leader_id, leader_epoch, 0))
                if records is None:
                    out.append(b"\x00")
                else:
                    out += (_uvarint(len(records) + 1), records)
                out.append(_uvarint(len(acquired) + 1))
                out += [_ACQUIRED.pack(first, last, count, 0) for first, last, count in acquired]
                out.append(_NO_TAGS)
            out.append(_NO_TAGS)
        out.append(_uvarint(len(self.node_endpoints) + 1))
        for node in self.node_endpoints:
            out += (_INT32.pack(node.node_id), _string(node.host), _INT32.pack(node.port), _string(node.rack),
                    _NO_TAGS)
        out.append(_NO_TAGS)
        return b"".join(out)


def _uvarint(value: int) -> bytes:
    if value < 0x80:     # every count and most lengths here
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _string(value: str | None) -> bytes:
    """A compact nullable string."""
    if value is None:
        return b"\x00"
    data = value.encode()
    return _uvarint(len(data) + 1) + data
