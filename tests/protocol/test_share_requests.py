"""ShareFetch and ShareAcknowledge requests decoded by hand read every field as the generated
decoder does, and refuse what it refuses: the same bodies, well-formed, cut short at every
byte and with bytes overwritten, decoded both ways."""
from __future__ import annotations

import struct
import uuid

import pytest

from headwater.broker.apis import ADVERTISED
from headwater.protocol import share_requests
from headwater.protocol.messages import ApiKey, ProtocolError, _decode, parse_request
from headwater.protocol.share_messages import ShareAcknowledgeRequest, ShareFetchRequest

VERSION = share_requests.VERSION
Fetched, Acknowledged = ShareFetchRequest.FetchTopic, ShareAcknowledgeRequest.AcknowledgeTopic
TOPICS = [uuid.UUID(int=n * 0x1234567890ABCDEF) for n in range(1, 4)]


def _partitions(cls, topic: int) -> list:
    Batch = cls.AcknowledgementBatch
    return [cls(partition_index=p, acknowledgement_batches=[
        Batch(first_offset=2**40 + p, last_offset=2**40 + p + 499, acknowledge_types=[1]),
        Batch(first_offset=7, last_offset=9, acknowledge_types=[0, 2, 3])][:p + topic]) for p in range(3)]


def share_fetch(group_id: str | None = "gruppe-é", member_id: str | None = "m-1") -> bytes:
    return ShareFetchRequest(
        group_id=group_id, member_id=member_id, share_session_epoch=4, max_wait_ms=500, min_bytes=1,
        max_bytes=52428800, max_records=500, batch_size=250,
        topics=[Fetched(topic_id=t, partitions=_partitions(Fetched.FetchPartition, n)) for n, t in enumerate(TOPICS)],
        forgotten_topics_data=[ShareFetchRequest.ForgottenTopic(topic_id=TOPICS[0], partitions=[1, 2**31 - 1])],
    ).encode(version=VERSION)


def share_acknowledge(group_id: str | None = "g", member_id: str | None = None) -> bytes:
    return ShareAcknowledgeRequest(
        group_id=group_id, member_id=member_id, share_session_epoch=-1,
        topics=[Acknowledged(topic_id=t, partitions=_partitions(Acknowledged.AcknowledgePartition, n))
                for n, t in enumerate(TOPICS)]).encode(version=VERSION)


def fields(request) -> tuple:
    """Every field of either request, as plain values."""
    topics = [(t.topic_id, [(p.partition_index, [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                                 for b in p.acknowledgement_batches]) for p in t.partitions])
              for t in request.topics]
    common = (request.group_id, request.member_id, request.share_session_epoch, topics)
    if not hasattr(request, "max_wait_ms"):
        return common
    return common + (request.max_wait_ms, request.min_bytes, request.max_bytes, request.max_records,
                     request.batch_size, [(t.topic_id, list(t.partitions)) for t in request.forgotten_topics_data])


APIS = {ApiKey.SHARE_FETCH: share_requests.decode_share_fetch_request,
        ApiKey.SHARE_ACKNOWLEDGE: share_requests.decode_share_acknowledge_request}
BODIES = [(ApiKey.SHARE_FETCH, share_fetch()), (ApiKey.SHARE_FETCH, share_fetch(None, None)),
          (ApiKey.SHARE_ACKNOWLEDGE, share_acknowledge()), (ApiKey.SHARE_ACKNOWLEDGE, share_acknowledge("", "m"))]


def both_ways(api: ApiKey, body: bytes) -> tuple:
    """(the hand decoder's fields or its refusal, the generated decoder's fields or its refusal)."""
    answers = []
    for decode in (APIS[api], lambda b, v: _decode(ADVERTISED[api], v, api.name, b)):
        try:
            answers.append(fields(decode(body, VERSION)))
        except (ValueError, ProtocolError):
            answers.append("refused")
    return tuple(answers)


@pytest.mark.parametrize("api, body", BODIES)
def test_every_field_reads_as_the_generated_decoder_reads_it(api, body):
    mine, generated = both_ways(api, body)
    assert mine == generated != "refused"


def frame(api: ApiKey, body: bytes) -> bytes:
    return struct.pack(">hhih", api, VERSION, 1, 4) + b"test" + b"\x00" + body    # header v2: empty tagged fields


@pytest.mark.parametrize("api, body", BODIES[::2])
def test_a_request_is_decoded_by_hand(api, body):
    _, decoded = parse_request(frame(api, body), ADVERTISED)
    assert type(decoded).__module__ == share_requests.__name__
    assert fields(decoded) == both_ways(api, body)[1]


@pytest.mark.parametrize("api, body", BODIES[::2])
def test_malformed_bodies_are_refused_where_the_generated_decoder_refuses_them(api, body):
    """Cut short at every byte, and each byte overwritten by 0x00 (nulls, empty counts), 0x01
    and 0xff (long varints, huge counts): refused by both, or read alike by both."""
    variants = [body[:n] for n in range(len(body))]
    variants += [body[:n] + bytes((b,)) + body[n + 1:] for n in range(len(body)) for b in (0x00, 0x01, 0xFF)]
    differ = [(n, *answers) for n, answers in enumerate(map(lambda v: both_ways(api, v), variants))
              if answers[0] != answers[1]]
    assert differ == []


def test_a_malformed_request_closes_the_connection_with_a_reason():
    body = share_fetch()
    null_topics = body[:body.index(TOPICS[0].bytes) - 1] + b"\x00"
    for malformed, reason in [(null_topics, "topics is null"), (body[:40], "the body ends")]:
        with pytest.raises(ProtocolError, match=reason):
            parse_request(frame(ApiKey.SHARE_FETCH, malformed), ADVERTISED)
