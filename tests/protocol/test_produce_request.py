"""The Produce request decoded by hand is the generated decoder's (with its null check), field
by field, on the same bodies, malformed ones included."""
from __future__ import annotations

import struct

import pytest

from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey, ProtocolError, _decode, api
from headwater.protocol.produce_request import MAX_VERSION, MIN_VERSION, decode_produce_request
from headwater.records import Record, encode_batch

Generated = MESSAGE_CLASSES[ApiKey.PRODUCE][0]
Data = Generated.TopicProduceData
BATCH = encode_batch([Record(0, 1_700_000_000_000, b"k", b"v" * 40), Record(1, 1_700_000_000_001, None, b"w")])


def body(version: int, transactional_id: str | None = "tx-é", topics=None) -> bytes:
    topics = {"orders": [(0, BATCH), (7, None)], "événements": [(2**31 - 1, b"")], "empty": []} if topics is None else topics
    request = Generated(transactional_id=transactional_id, acks=-1, timeout_ms=30_000, topic_data=[
        Data(name=name, partition_data=[Data.PartitionProduceData(index=i, records=r) for i, r in parts])
        for name, parts in topics.items()])
    return request.encode(version=version)


def fields(request) -> tuple:
    return (request.transactional_id, request.acks, request.timeout_ms,
            [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in request.topic_data])


def generated(data: bytes, version: int):
    return _decode(api(ApiKey.PRODUCE, MIN_VERSION, MAX_VERSION), version, "PRODUCE", data)


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@pytest.mark.parametrize("transactional_id", [None, "tx-é"])
def test_bodies_decode_as_the_generated_decoder_decodes_them(version, transactional_id):
    data = body(version, transactional_id)
    assert fields(decode_produce_request(memoryview(data), version)) == fields(generated(data, version))
    # bytes after the last field are ignored by both
    assert fields(decode_produce_request(data + b"\x00\x01", version)) == fields(generated(data + b"\x00\x01", version))


def test_the_records_are_a_view_of_the_request_not_a_copy():
    """The validator copies a partition's records once, into the buffer the log stamps; the decoder
    must not copy them first (an 850 KB request of librdkafka's costs ~40 us to copy)."""
    data = body(8)
    records = decode_produce_request(memoryview(data), 8).topic_data[0].partition_data[0].records
    assert records == BATCH and isinstance(records, memoryview) and records.obj is data


def test_every_truncation_is_refused():
    data = body(8)
    for end in range(len(data)):
        with pytest.raises(ValueError):
            decode_produce_request(data[:end], 8)


NULL_NAME = struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", -1) + struct.pack(">i", 0)
NULL_TOPICS = struct.pack(">hhii", -1, 1, 1000, -1)
NULL_PARTITIONS = struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
BAD_UTF8 = struct.pack(">hhii", -1, 1, 1000, 1) + struct.pack(">h", 1) + b"\xff" + struct.pack(">i", 0)


@pytest.mark.parametrize("data", [NULL_NAME, NULL_TOPICS, NULL_PARTITIONS, BAD_UTF8],
                         ids=["null topic name", "null topic list", "null partition list", "bad utf-8"])
def test_what_the_generated_decoder_refuses_is_refused(data):
    with pytest.raises(ProtocolError):
        generated(data, 8)
    with pytest.raises(ValueError):
        decode_produce_request(data, 8)
