"""Fetch requests v4–v11 (none of them flexible) decoded by hand, the hot path's twin of
kafka-python's generated ``FetchRequest`` decoder.

librdkafka names every partition it consumes in every fetch and turns the list round by one
each time, so no two of its bodies are alike and each must be decoded: here a topic's
partitions are its bytes (``FetchPartitions``), turned into tuples (one ``struct.iter_unpack``)
only when looked at, or read as one numpy array. The objects carry the generated
class's field names, so a handler cannot tell them apart (tests/unit/test_fetch_request.py
decodes the same bodies both ways). A null where Kafka's schema allows none, a negative
count or a body cut short is a ``ValueError`` (``body_reader``), as the generated decoder's errors are.
"""
from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from headwater.protocol.body_reader import BodyReader

MIN_VERSION, MAX_VERSION = 4, 11
_INT32 = struct.Struct(">i")
_LIMITS = struct.Struct(">iiiib")   # replica id, max wait, min and max bytes, isolation level
_SESSION = struct.Struct(">ii")     # from v7: session id and epoch


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int


class FetchPartitions(Sequence):
    """A topic's partitions as the request lists them, each decoded when it is looked at: a wide
    fetch without a session reads them as one array (``array``), and decodes only the few it
    must read a log for."""
    __slots__ = ("raw", "version", "_decoded")

    def __init__(self, raw: bytes, version: int) -> None:
        self.raw, self.version, self._decoded = raw, version, None

    def __len__(self) -> int:
        return len(self.raw) // _PARTITION[self.version].size

    def __getitem__(self, i):
        fields = _PARTITION[self.version]
        if self._decoded is None and type(i) is int and 0 <= i < len(self):
            return _AS_PARTITION[self.version](fields.unpack_from(self.raw, i * fields.size))
        return self.decoded()[i]

    def __iter__(self):
        return iter(self.decoded())

    def __eq__(self, other) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def decoded(self) -> list[FetchPartition]:
        if self._decoded is None:
            self._decoded = list(map(_AS_PARTITION[self.version], _PARTITION[self.version].iter_unpack(self.raw)))
        return self._decoded

    def array(self) -> np.ndarray:
        return np.frombuffer(self.raw, PARTITION_FIELDS[self.version])


class FetchTopic:
    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: Sequence) -> None:
        self.topic, self.partitions = topic, partitions


class ForgottenTopic:
    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: list[int]) -> None:
        self.topic, self.partitions = topic, partitions


class FetchRequest:
    __slots__ = ("replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level", "session_id",
                 "session_epoch", "topics", "forgotten_topics_data", "rack_id")

    def __init__(self, replica_id: int, max_wait_ms: int, min_bytes: int, max_bytes: int, isolation_level: int,
                 session_id: int, session_epoch: int, topics: list[FetchTopic],
                 forgotten_topics_data: list[ForgottenTopic], rack_id: str) -> None:
        self.replica_id, self.max_wait_ms, self.min_bytes, self.max_bytes = replica_id, max_wait_ms, min_bytes, max_bytes
        self.isolation_level, self.session_id, self.session_epoch = isolation_level, session_id, session_epoch
        self.topics, self.forgotten_topics_data, self.rack_id = topics, forgotten_topics_data, rack_id

    def __copy__(self) -> FetchRequest:
        """A shallow copy (a repeated body's kept decoding is handed out as one): one call, where
        copy.copy's generic way through ``__reduce_ex__`` takes five."""
        return FetchRequest(self.replica_id, self.max_wait_ms, self.min_bytes, self.max_bytes, self.isolation_level,
                            self.session_id, self.session_epoch, self.topics, self.forgotten_topics_data, self.rack_id)


# A partition's fields by version: the leader epoch from v9, the log start offset from v5.
_PARTITION = {v: struct.Struct(">i" + ("i" if v >= 9 else "") + "q" + ("q" if v >= 5 else "") + "i")
              for v in range(MIN_VERSION, MAX_VERSION + 1)}


def _as_partition(version: int):
    """Turns a partition's unpacked fields into a FetchPartition, absent fields at their defaults."""
    if version >= 9:
        return FetchPartition._make
    if version >= 5:
        return lambda f: FetchPartition(f[0], -1, f[1], f[2], f[3])
    return lambda f: FetchPartition(f[0], -1, f[1], -1, f[2])


_AS_PARTITION = {v: _as_partition(v) for v in range(MIN_VERSION, MAX_VERSION + 1)}
# The same fields as numpy sees them, by version.
PARTITION_FIELDS = {v: np.dtype([("partition", ">i4")] + ([("current_leader_epoch", ">i4")] if v >= 9 else [])
                                + [("fetch_offset", ">i8")] + ([("log_start_offset", ">i8")] if v >= 5 else [])
                                + [("partition_max_bytes", ">i4")]) for v in range(MIN_VERSION, MAX_VERSION + 1)}


def decode_fetch_request(body, version: int) -> FetchRequest:
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise ValueError(f"Fetch v{version} requests are not decoded here")
    read = BodyReader(body)
    replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level = read.unpack(_LIMITS)
    session_id, session_epoch = read.unpack(_SESSION) if version >= 7 else (0, -1)
    fields = _PARTITION[version]
    topics = []
    for _ in range(read.count("topics")):
        name = read.string("topics.topic")
        chunk = read.take(read.count("topics.partitions") * fields.size)
        topics.append(FetchTopic(name, FetchPartitions(bytes(chunk), version)))
    forgotten = []
    if version >= 7:
        for _ in range(read.count("forgotten_topics_data")):
            name = read.string("forgotten_topics_data.topic")
            chunk = read.take(read.count("forgotten_topics_data.partitions") * 4)
            forgotten.append(ForgottenTopic(name, [p for (p,) in _INT32.iter_unpack(chunk)]))
    rack_id = read.string("rack_id") if version >= 11 else ""
    return FetchRequest(replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level, session_id, session_epoch,
                        topics, forgotten, rack_id)
