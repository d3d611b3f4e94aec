"""Fetch requests decoded by hand read every field as the generated decoder does, and refuse
what it refuses (nulls the schema forbids, a body cut short) with a clear error."""
from __future__ import annotations

import struct

import pytest

from headwater.broker.apis import ADVERTISED
from headwater.protocol.fetch_request import MAX_VERSION, MIN_VERSION, decode_fetch_request
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey, ProtocolError, _decode, parse_request

Generated = MESSAGE_CLASSES[ApiKey.FETCH][0]
Topic, Forgotten = Generated.FetchTopic, Generated.ForgottenTopic


def generated(version: int):
    request = Generated(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=52428800, isolation_level=1,
                        session_id=12, session_epoch=3, rack_id="rack-1", topics=[
                            Topic(topic="orders", partitions=[Topic.FetchPartition(
                                partition=p, current_leader_epoch=p % 3, fetch_offset=2**40 + p, log_start_offset=p,
                                partition_max_bytes=1 << 20) for p in range(5)]),
                            Topic(topic="événements", partitions=[]),
                            Topic(topic="x", partitions=[Topic.FetchPartition(
                                partition=7, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                                partition_max_bytes=0)])],
                        forgotten_topics_data=[Forgotten(topic="gone", partitions=[1, 2**31 - 1])])
    return request.encode(version=version)


def fields(request, version: int) -> tuple:
    """Every field the version carries, with the schema's defaults where it carries none."""
    return (request.replica_id, request.max_wait_ms, request.min_bytes, request.max_bytes, request.isolation_level,
            request.session_id if version >= 7 else 0, request.session_epoch if version >= 7 else -1,
            [(t.topic, [(p.partition, p.current_leader_epoch if version >= 9 else -1, p.fetch_offset,
                         p.log_start_offset if version >= 5 else -1, p.partition_max_bytes) for p in t.partitions])
             for t in request.topics],
            [(t.topic, list(t.partitions)) for t in request.forgotten_topics_data] if version >= 7 else [],
            request.rack_id if version >= 11 else "")


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_every_field_reads_as_the_generated_decoder_reads_it(version):
    body = generated(version)
    assert fields(decode_fetch_request(body, version), version) == fields(Generated.decode(body, version=version),
                                                                         version)


def frame(version: int, body: bytes) -> bytes:
    return struct.pack(">hhih", ApiKey.FETCH, version, 1, 4) + b"test" + body


def test_nulls_and_short_bodies_close_the_connection_with_a_reason():
    body = generated(11)
    null_topic = body.replace(struct.pack(">h", 6) + b"orders", struct.pack(">h", -1), 1)
    null_partitions = body[:body.index(b"orders") + 6] + struct.pack(">i", -1)
    for malformed, reason in [(null_topic, "topics.topic is null"), (null_partitions, "topics.partitions is null"),
                              (body[:60], "the body ends"), (body[:40], "the body ends")]:
        with pytest.raises(ProtocolError, match=reason):
            parse_request(frame(11, malformed), ADVERTISED)
        with pytest.raises(ProtocolError):   # the generated decoder refuses the same bodies
            _decode(ADVERTISED[ApiKey.FETCH], 11, "FETCH", malformed)
    # A string cut short at the very end the generated decoder reads short ("rack-1" as "rac"): refused here.
    with pytest.raises(ProtocolError, match="the body ends"):
        parse_request(frame(11, body[:-3]), ADVERTISED)
