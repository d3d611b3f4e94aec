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

import struct
from typing import NamedTuple

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
        partition_head = _partition_heads[version]
        replica = version >= 11
        out = [struct.pack(">ihi", self.throttle_time_ms, self.error_code, self.session_id) if version >= 7 else
               struct.pack(">i", self.throttle_time_ms), _COUNT.pack(len(self.responses))]
        for topic in self.responses:
            name = topic.topic.encode()
            out.append(struct.pack(">h", len(name)))
            out.append(name)
            out.append(_COUNT.pack(len(topic.partitions)))
            for p in topic.partitions:
                if type(p) is not FetchedPartition:
                    p = FetchedPartition.of(p)
                index, error, high_watermark, stable, start, aborted, preferred, records = p
                size = -1 if records is None else len(records)
                # none (read_uncommitted: null) or an empty list: the partition is one pack
                count = (-1 if aborted is None else 0) if not aborted else len(aborted)
                if count <= 0 and version >= 11:
                    out.append(partition_head.pack(index, error, high_watermark, stable, start, count, preferred, size))
                elif count <= 0 and version >= 5:
                    out.append(partition_head.pack(index, error, high_watermark, stable, start, count, size))
                elif count <= 0:
                    out.append(partition_head.pack(index, error, high_watermark, stable, count, size))
                else:
                    offsets = (high_watermark, stable, start) if version >= 5 else (high_watermark, stable)
                    out.append(_partition_start[version].pack(index, error, *offsets, count))
                    out += [_ABORTED.pack(*a) if isinstance(a, tuple) else _ABORTED.pack(a.producer_id, a.first_offset)
                            for a in aborted]
                    out.append(struct.pack(">ii", preferred, size) if replica else _COUNT.pack(size))
                if size > 0:
                    out.append(records)
        return b"".join(out)


# Per version: a partition up to its aborted transactions' count, and that plus what follows
# when there are none (the preferred read replica from v11, the records' size).
_partition_start = {v: struct.Struct(">ihqq" + ("q" if v >= 5 else "") + "i") for v in range(MIN_VERSION, MAX_VERSION + 1)}
_partition_heads = {v: struct.Struct(s.format + ("ii" if v >= 11 else "i")) for v, s in _partition_start.items()}
