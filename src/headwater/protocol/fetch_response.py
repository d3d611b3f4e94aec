"""Fetch responses v4–v11 (the versions the broker serves, none of them flexible) encoded
straight to bytes, the hot path's twin of kafka-python's generated ``FetchResponse``.

librdkafka has no fetch sessions: every fetch names every partition it consumes, and the
response answers each, so building one generated object per partition and encoding it field
by field was most of what a fetch of thousands of partitions cost. Here a partition is a
tuple, and a partition without records or aborted transactions (the common case) is one
``struct.pack``. Any object with the generated ``PartitionData``'s field names is accepted
too (the authorization rule answers denied topics with those), and
tests/unit/test_fetch_response.py holds the bytes equal to the generated encoder's.
"""
from __future__ import annotations

import functools
import struct
from typing import NamedTuple

import numpy as np

from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey

_Generated = MESSAGE_CLASSES[ApiKey.FETCH][1]
MIN_VERSION, MAX_VERSION = 4, 11
_COUNT = struct.Struct(">i")
_ABORTED = struct.Struct(">qq")


class FetchedPartition(NamedTuple):
    """One partition of a Fetch response, fields as Kafka's schema names them."""
    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: list | None   # of (producer_id, first_offset) or objects with those fields
    preferred_read_replica: int
    records: bytes | memoryview | None

    @classmethod
    def of(cls, partition) -> FetchedPartition:
        """A generated ``PartitionData`` (or anything with its field names) as a tuple."""
        return cls(partition.partition_index, partition.error_code, partition.high_watermark,
                   partition.last_stable_offset, partition.log_start_offset, partition.aborted_transactions,
                   partition.preferred_read_replica, partition.records)


class FetchedTopic:
    __slots__ = ("topic", "partitions")

    def __init__(self, topic: str, partitions: list) -> None:
        self.topic, self.partitions = topic, partitions


class FetchResponse:
    """A Fetch response body as the server frames it (``encode``), shaped like the generated
    class where the broker's other parts look: the authorization rule replaces a denied topic's
    ``partitions`` with generated ``FetchableTopicResponse.PartitionData``, quotas set
    ``throttle_time_ms`` and count ``records``."""
    __slots__ = ("throttle_time_ms", "error_code", "session_id", "responses")
    FetchableTopicResponse = _Generated.FetchableTopicResponse

    def __init__(self, throttle_time_ms: int, error_code: int, session_id: int, responses: list[FetchedTopic]):
        self.throttle_time_ms, self.error_code, self.session_id = throttle_time_ms, error_code, session_id
        self.responses = responses

    def encode(self, version: int) -> bytes:
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"Fetch v{version} responses are not encoded here")
        out = [struct.pack(">ihi", self.throttle_time_ms, self.error_code, self.session_id) if version >= 7 else
               struct.pack(">i", self.throttle_time_ms), _COUNT.pack(len(self.responses))]
        for topic in self.responses:
            name = topic.topic.encode()
            out.append(struct.pack(">h", len(name)))
            out.append(name)
            if type(topic) is SplicedTopic and topic.replaced is None:
                topic.encode_partitions(out, version)
                continue
            out.append(_COUNT.pack(len(topic.partitions)))
            for p in topic.partitions:
                _encode_partition(out, p, version)
        return b"".join(out)


def _encode_partition(out: list, p, version: int) -> None:
    if type(p) is not FetchedPartition:
        p = FetchedPartition.of(p)
    index, error, high_watermark, stable, start, aborted, preferred, records = p
    size = -1 if records is None else len(records)
    # none (read_uncommitted: null) or an empty list: the partition is one pack
    count = (-1 if aborted is None else 0) if not aborted else len(aborted)
    if count <= 0 and version >= 11:
        out.append(_partition_heads[version].pack(index, error, high_watermark, stable, start, count, preferred, size))
    elif count <= 0 and version >= 5:
        out.append(_partition_heads[version].pack(index, error, high_watermark, stable, start, count, size))
    elif count <= 0:
        out.append(_partition_heads[version].pack(index, error, high_watermark, stable, count, size))
    else:
        offsets = (high_watermark, stable, start) if version >= 5 else (high_watermark, stable)
        out.append(_partition_start[version].pack(index, error, *offsets, count))
        out += [_ABORTED.pack(*a) if isinstance(a, tuple) else _ABORTED.pack(a.producer_id, a.first_offset)
                for a in aborted]
        out.append(struct.pack(">ii", preferred, size) if version >= 11 else _COUNT.pack(size))
    if size > 0:
        out.append(records)


class SplicedTopic:
    """A topic of a wide fetch as one array of partition entries, each as a quiet partition
    (no records, no error) answers: ``quiet_entries``, from the logs' offsets in one step for
    all of them. The few partitions read (``read``, by position) are encoded as usual and
    spliced in, so a quiet partition costs no Python step of its own. ``partitions`` builds the
    usual tuples for who looks (the quota's byte count, tests); set, it replaces the topic's
    answer (the authorization rule's denial), which is then encoded as usual."""
    __slots__ = ("topic", "quiet_entries", "read", "replaced")

    def __init__(self, topic: str, quiet_entries: np.ndarray, read: dict[int, FetchedPartition]) -> None:
        self.topic, self.quiet_entries, self.read, self.replaced = topic, quiet_entries, read, None

    @property
    def partitions(self) -> list:
        if self.replaced is not None:
            return self.replaced
        quiet = [FetchedPartition(int(e["partition_index"]), 0, int(e["high_watermark"]), int(e["last_stable_offset"]),
                                  int(e["log_start_offset"]) if "log_start_offset" in e.dtype.names else -1,
                                  None if e["aborted_count"] < 0 else [], -1, b"") for e in self.quiet_entries]
        return [self.read.get(i, p) for i, p in enumerate(quiet)]

    @partitions.setter
    def partitions(self, partitions: list) -> None:
        self.replaced = partitions

    def encode_partitions(self, out: list, version: int) -> None:
        entries = self.quiet_entries
        if entries.dtype != _QUIET_ENTRY[version]:   # the server answers at the request's version
            raise ValueError(f"a topic's entries made for another version cannot be encoded at v{version}")
        out.append(_COUNT.pack(len(entries)))
        # a byte view, sliced without copying: b"".join copies the 44 KB of 1,000 entries once, not twice
        rows, size, done = memoryview(entries.view(np.uint8)), entries.itemsize, 0
        for i in sorted(self.read):
            out.append(rows[done * size:i * size])
            _encode_partition(out, self.read[i], version)
            done = i + 1
        out.append(rows[done * size:])


def quiet_entries(version: int, count: int) -> np.ndarray:
    """``count`` partition entries of a Fetch response at ``version`` (no records: size 0, no
    aborted transactions' list: count -1, no preferred replica), to be filled in by field."""
    # the template's bytes in one copy: setting the fields one by one (or a structured copy) is 2-10x that;
    # viewed in place, as numpy's view of a structured array as bytes runs a Python check each time
    return np.frombuffer(bytearray(_quiet_template(version, count)), _QUIET_ENTRY[version])


@functools.lru_cache(maxsize=8)   # a consumer names the same partitions fetch after fetch
def _quiet_template(version: int, count: int) -> np.ndarray:
    entries = np.zeros(count, _QUIET_ENTRY[version])
    entries["aborted_count"] = -1
    if version >= 11:
        entries["preferred_read_replica"] = -1
    return entries.view(np.uint8)


# Per version: a partition up to its aborted transactions' count, and that plus what follows
# when there are none (the preferred read replica from v11, the records' size).
_partition_start = {v: struct.Struct(">ihqq" + ("q" if v >= 5 else "") + "i") for v in range(MIN_VERSION, MAX_VERSION + 1)}
_partition_heads = {v: struct.Struct(s.format + ("ii" if v >= 11 else "i")) for v, s in _partition_start.items()}
# The same entry, without records or aborted transactions, as numpy sees it.
_QUIET_ENTRY = {v: np.dtype([("partition_index", ">i4"), ("error_code", ">i2"), ("high_watermark", ">i8"),
                             ("last_stable_offset", ">i8")] + ([("log_start_offset", ">i8")] if v >= 5 else [])
                            + [("aborted_count", ">i4")] + ([("preferred_read_replica", ">i4")] if v >= 11 else [])
                            + [("records_size", ">i4")]) for v in range(MIN_VERSION, MAX_VERSION + 1)}
