"""Bad input gets the right Kafka error (or a closed connection), and the broker keeps serving, data intact."""
import struct

import pytest
from kafka.protocol.admin import DeleteTopicsRequest
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from headwater import records
from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce
from tests.support.wire import Wire

CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, OFFSET_OUT_OF_RANGE = 2, 3, 1
MESSAGE_TOO_LARGE, UNSUPPORTED_VERSION = 10, 35


def batch(value: bytes = b"v") -> bytes:
    return records.encode_batch([records.Record(0, 1_700_000_000_000, b"k", value)])


def produce(wire: Wire, topic: str, partition: int, data: bytes):
    P = ProduceRequest[7]
    request = P(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=partition,
                                                                                                records=data)])])
    return wire.request(request, 7).responses[0].partition_responses[0]


def fetch(wire: Wire, topic: str, partition: int, offset: int, max_wait_ms: int = 0):
    F = FetchRequest[11]
    request = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                session_id=0, session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[
                    F.FetchTopic.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=offset,
                                                log_start_offset=-1, partition_max_bytes=1 << 20)])],
                forgotten_topics_data=[], rack_id="")
    return wire.request(request, 11).responses[0].partitions[0]


@pytest.fixture
def seeded(broker):
    """A broker holding 10 known records in topic `keep`, and a check that they are still all there."""
    delivered = confluent_produce(broker.bootstrap, "keep", [(b"k%d" % i, b"v%d" % i, []) for i in range(10)],
                                  partitioner="murmur2_random")

    def intact():
        parts = sorted({p for p, *_ in delivered})
        assert sorted(confluent_consume(broker.bootstrap, "keep", parts, len(delivered))) == sorted(delivered)
    return broker, intact


def assert_closed_and_serving(broker, wire, intact):
    assert wire.is_closed()
    fresh = Wire(broker.bootstrap)
    assert fresh.request(MetadataRequest[1](topics=None), 1).brokers[0].port == broker.port
    fresh.close()
    intact()


def test_truncated_frame_then_disconnect(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    wire.send_raw(struct.pack(">i", 100) + b"\x00\x03\x00\x01")  # promises 100 bytes, sends 4, hangs up
    wire.close()
    fresh = Wire(broker.bootstrap)
    assert fresh.request(MetadataRequest[1](topics=None), 1).brokers[0].port == broker.port
    intact()


def test_garbage_body_closes_connection(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    garbage = struct.pack(">hhih", 0, 7, 1, -1) + b"\xff" * 30  # a Produce v7 header, then nonsense
    wire.send_raw(struct.pack(">i", len(garbage)) + garbage)
    assert_closed_and_serving(broker, wire, intact)


def test_absurd_length_prefix_closes_connection(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    wire.send_raw(struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 64)
    assert_closed_and_serving(broker, wire, intact)


def test_negative_length_prefix_closes_connection(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    wire.send_raw(struct.pack(">i", -5))
    assert_closed_and_serving(broker, wire, intact)


def test_bad_crc_is_refused_and_nothing_appended(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    good = produce(wire, "crc", 0, batch(b"good"))
    assert good.error_code == 0
    bad = bytearray(batch(b"evil"))
    bad[-1] ^= 0x01
    assert produce(wire, "crc", 0, bytes(bad)).error_code == CORRUPT_MESSAGE
    truncated = batch(b"cut")[:-4]
    assert produce(wire, "crc", 0, truncated).error_code == CORRUPT_MESSAGE
    part = fetch(wire, "crc", 0, 0)
    assert part.high_watermark == 1
    _, recs = records.decode_records(part.records)
    assert [r.value for r in recs] == [b"good"]
    intact()


def test_unknown_partition_and_out_of_range_offset(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    assert produce(wire, "keep", 99, batch()).error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(wire, "keep", 99, 0).error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(wire, "no-such-topic", 0, 0).error_code == UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(wire, "keep", 0, 10_000).error_code == OFFSET_OUT_OF_RANGE
    assert fetch(wire, "keep", 0, -7).error_code == OFFSET_OUT_OF_RANGE
    intact()


def test_unknown_topic_without_auto_create(tmp_path):
    with BrokerProcess(tmp_path / "data", "--no-auto-create") as broker:
        wire = Wire(broker.bootstrap)
        meta = wire.request(MetadataRequest[8](topics=[MetadataRequest[8].MetadataRequestTopic(name="ghost")],
                                               allow_auto_topic_creation=True, include_cluster_authorized_operations=False,
                                               include_topic_authorized_operations=False), 8)
        assert meta.topics[0].error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert produce(wire, "ghost", 0, batch()).error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert not (tmp_path / "data" / "ghost-0").exists()


def test_invalid_topic_name(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    assert produce(wire, "bad/name", 0, batch()).error_code == 17  # INVALID_TOPIC_EXCEPTION
    intact()


def test_message_too_large(tmp_path):
    with BrokerProcess(tmp_path / "data", "--message-max-bytes", "1000") as broker:
        wire = Wire(broker.bootstrap)
        assert produce(wire, "big", 0, batch(b"x" * 5000)).error_code == MESSAGE_TOO_LARGE
        assert produce(wire, "big", 0, batch(b"small")).error_code == 0
        assert fetch(wire, "big", 0, 0).high_watermark == 1


def test_unsupported_api_versions_version_gets_v0_answer(seeded):
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    header = struct.pack(">hhih", 18, 99, 42, 4) + b"test"
    wire.send_raw(struct.pack(">i", len(header)) + header)
    frame = wire.recv_frame()
    assert struct.unpack_from(">i", frame)[0] == 42
    # the v0 response body follows a v0 header (no tagged fields)
    response = ApiVersionsResponse.decode(frame[4:], version=0)
    assert response.error_code == UNSUPPORTED_VERSION
    keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert keys[0] == (3, 8) and keys[1] == (4, 11) and keys[18] == (0, 4)
    # the same connection goes on to work
    assert wire.request(ApiVersionsRequest[3](client_software_name="t", client_software_version="1"), 3).error_code == 0
    intact()


def test_unsupported_produce_version_and_unknown_api_close_connection(seeded):
    broker, intact = seeded
    for api_key, version in ((0, 99), (999, 0)):
        wire = Wire(broker.bootstrap)
        header = struct.pack(">hhih", api_key, version, 1, -1)
        wire.send_raw(struct.pack(">i", len(header)) + header)
        assert_closed_and_serving(broker, wire, intact)


def test_flood_of_unknown_partitions_keeps_memory_bounded(seeded):
    """Finding 7 of issue 10: each unknown partition named in a Fetch used to leave a growth
    signal behind for good (RSS 51 -> 323 MB after a million)."""
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    F = FetchRequest[11]

    def flood(round_: int) -> None:
        topics = [F.FetchTopic(topic=f"ghost-{round_}-{t}", partitions=[F.FetchTopic.FetchPartition(
            partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1024)
            for p in range(100)]) for t in range(250)]
        request = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                    session_epoch=-1, topics=topics, forgotten_topics_data=[], rack_id="")
        response = wire.request(request, 11)
        assert {p.error_code for t in response.responses for p in t.partitions} == {UNKNOWN_TOPIC_OR_PARTITION}

    flood(0)  # the first round grows the allocator's arenas once; what follows must not keep growing
    before = broker.rss_bytes()
    for round_ in range(1, 9):  # 200,000 more distinct unknown partitions
        flood(round_)
    grown = broker.rss_bytes() - before
    assert grown < 16 << 20, f"RSS grew by {grown >> 20} MB after 200,000 unknown partitions"
    intact()


def test_null_arrays_close_the_connection_with_one_line(seeded):
    """Finding 8 of issue 10: a null (count -1) where the schema allows none used to reach the
    handler and end in a TypeError traceback; now the codec refuses it, naming the field."""
    broker, intact = seeded
    F = FetchRequest[11]
    nulls = [(DeleteTopicsRequest[3](topic_names=None, timeout_ms=1000), 3, "topic_names is null"),
             (F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic="keep", partitions=None)], forgotten_topics_data=[],
                rack_id=""), 11, "topics.partitions is null"),
             (DeleteTopicsRequest[3](topic_names=["keep", None], timeout_ms=1000), 3, "topic_names[] is null")]
    for request, version, message in nulls:
        wire = Wire(broker.bootstrap)
        request.API_VERSION = version
        request.with_header(correlation_id=1, client_id="nulls")
        wire.send_raw(bytes(request.encode(header=True, framed=True)))
        assert_closed_and_serving(broker, wire, intact)
        assert message in broker.log_file.read_text()
    assert "Traceback" not in broker.log_file.read_text()
