"""ShareFetch and ShareAcknowledge requests (v1, the version the broker serves; flexible)
decoded by hand, the hot path's twins of the generated decoders in ``share_messages``.

A share consumer's every poll is one ShareFetch carrying the previous poll's acknowledgements,
decoded before their state record is written and its fsync started: the generated decoder's
field-by-field walk sat on that path. The objects carry the generated classes' field names,
so a handler cannot tell them apart (tests/protocol/test_share_requests.py decodes the same
bodies, malformed ones too, both ways). A null where Kafka's schema allows none, a negative
count or a body cut short is a ``ValueError`` (``body_reader``).
"""
from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from headwater.protocol.body_reader import BodyReader

VERSION = 1
_SESSION_EPOCH = struct.Struct(">i")
_FETCH_LIMITS = struct.Struct(">iiiiii")   # session epoch, max wait, min and max bytes, max records, batch size
_OFFSETS = struct.Struct(">qq")            # an acknowledgement batch's first and last offset
_INT32 = struct.Struct(">i")


class AcknowledgementBatch(NamedTuple):
    first_offset: int
    last_offset: int
    acknowledge_types: list[int]


class AcknowledgedPartition(NamedTuple):
    partition_index: int
    acknowledgement_batches: list[AcknowledgementBatch]


class SharedTopic(NamedTuple):
    topic_id: uuid.UUID
    partitions: list[AcknowledgedPartition]


class ForgottenTopic(NamedTuple):
    topic_id: uuid.UUID
    partitions: list[int]


class ShareFetchRequest:
    __slots__ = ("group_id", "member_id", "share_session_epoch", "max_wait_ms", "min_bytes", "max_bytes",
                 "max_records", "batch_size", "topics", "forgotten_topics_data")

    def __init__(self, group_id: str | None, member_id: str | None, limits: tuple[int, ...],
                 topics: list[SharedTopic], forgotten_topics_data: list[ForgottenTopic]) -> None:
        self.group_id, self.member_id = group_id, member_id
        (self.share_session_epoch, self.max_wait_ms, self.min_bytes, self.max_bytes, self.max_records,
         self.batch_size) = limits
        self.topics, self.forgotten_topics_data = topics, forgotten_topics_data


class ShareAcknowledgeRequest:
    __slots__ = ("group_id", "member_id", "share_session_epoch", "topics")

    def __init__(self, group_id: str | None, member_id: str | None, share_session_epoch: int,
                 topics: list[SharedTopic]) -> None:
        self.group_id, self.member_id, self.share_session_epoch = group_id, member_id, share_session_epoch
        self.topics = topics


def decode_share_fetch_request(body, version: int) -> ShareFetchRequest:
    read = _reader(body, version, "ShareFetch")
    group_id, member_id = read.compact_nullable_string(), read.compact_nullable_string()
    limits = read.unpack(_FETCH_LIMITS)
    topics = _topics(read)
    forgotten = []
    for _ in range(read.compact_count("forgotten_topics_data")):
        topic_id = _uuid(read)
        partitions = [p for (p,) in _INT32.iter_unpack(read.take(read.compact_count(
            "forgotten_topics_data.partitions") * _INT32.size))]
        read.skip_tagged_fields()
        forgotten.append(ForgottenTopic(topic_id, partitions))
    read.skip_tagged_fields()
    return ShareFetchRequest(group_id, member_id, limits, topics, forgotten)


def decode_share_acknowledge_request(body, version: int) -> ShareAcknowledgeRequest:
    read = _reader(body, version, "ShareAcknowledge")
    group_id, member_id = read.compact_nullable_string(), read.compact_nullable_string()
    (epoch,) = read.unpack(_SESSION_EPOCH)
    topics = _topics(read)
    read.skip_tagged_fields()
    return ShareAcknowledgeRequest(group_id, member_id, epoch, topics)


def _reader(body, version: int, api: str) -> BodyReader:
    if version != VERSION:
        raise ValueError(f"{api} v{version} requests are not decoded here")
    return BodyReader(body)


def _topics(read: BodyReader) -> list[SharedTopic]:
    """The topics, their partitions and each partition's acknowledgement batches."""
    topics = []
    for _ in range(read.compact_count("topics")):
        topic_id, partitions = _uuid(read), []
        for _ in range(read.compact_count("topics.partitions")):
            (index,), batches = read.unpack(_INT32), []
            for _ in range(read.compact_count("topics.partitions.acknowledgement_batches")):
                first, last = read.unpack(_OFFSETS)
                types = read.take(read.compact_count("topics.partitions.acknowledgement_batches.acknowledge_types"))
                batches.append(AcknowledgementBatch(first, last, list(struct.unpack(f">{len(types)}b", types))))
                read.skip_tagged_fields()
            read.skip_tagged_fields()
            partitions.append(AcknowledgedPartition(index, batches))
        read.skip_tagged_fields()
        topics.append(SharedTopic(topic_id, partitions))
    return topics


def _uuid(read: BodyReader) -> uuid.UUID:
    return uuid.UUID(bytes=bytes(read.take(16)))
