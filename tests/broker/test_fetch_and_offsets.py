"""Long-polling fetches wake on append; a log that cannot be read fails its partition alone;
ListOffsets finds earliest, latest and by timestamp."""
import os
import threading

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.protocol.consumer import FetchRequest, OffsetForLeaderEpochRequest

from headwater import records
from headwater.log import layout
from headwater.protocol.errors import ErrorCode

from tests.support.clients import confluent_consume, confluent_produce
from tests.broker.test_bad_input import fetch, produce
from tests.support.wire import Wire


def test_waiting_fetch_wakes_when_its_partition_grows(broker):
    wire = Wire(broker.bootstrap, timeout=60)
    assert produce(wire, "feed", 0, records.encode_batch([records.Record(0, 1, b"k", b"first")])).error_code == 0
    result = {}
    waiter = Wire(broker.bootstrap, timeout=60)

    def long_poll():  # waits up to 10 minutes unless the append wakes it (the socket gives up after 60 s)
        result["partition"] = fetch(waiter, "feed", 0, 1, max_wait_ms=600_000)

    thread = threading.Thread(target=long_poll)
    thread.start()
    thread.join(1.0)
    assert thread.is_alive(), "the fetch returned before there was anything new"
    produce(wire, "feed", 0, records.encode_batch([records.Record(0, 2, b"k", b"second")]))
    thread.join(60)
    assert not thread.is_alive()
    _, recs = records.decode_records(result["partition"].records)
    assert [r.value for r in recs] == [b"second"]


def test_an_unreadable_log_fails_its_partition_alone_and_the_broker_serves_on(broker):
    sent = confluent_produce(broker.bootstrap, "damaged", [(b"k%d" % i, b"v%d" % i, []) for i in range(20)])
    assert {p for p, *_ in sent} == {0, 1, 2}
    # the disk loses partition 0's segment under the running broker: its reads now find a cut batch header
    os.truncate(layout.segment_file(layout.partition_dir(broker.data_dir, "damaged", 0), 0, layout.LOG), 30)
    F = FetchRequest[11]
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[F.FetchTopic(
                    topic="damaged", partitions=[F.FetchTopic.FetchPartition(
                        partition=p, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                        partition_max_bytes=1 << 20) for p in (0, 1, 2)])])
    answered = {p.partition_index: p for p in Wire(broker.bootstrap).request(request, 11).responses[0].partitions}
    assert answered[0].error_code == ErrorCode.KAFKA_STORAGE_ERROR == 56
    for p in (1, 2):
        assert answered[p].error_code == 0
        data = answered[p].records
        assert [r.value for pos, _ in records.iter_batches(data) for r in records.decode_records(data, pos)[1]] == \
            [v for q, _, _, v, _ in sent if q == p]
    # a real consumer still reads the healthy partitions, and the broker keeps serving
    healthy = [m for m in sent if m[0] != 0]
    assert sorted(confluent_consume(broker.bootstrap, "damaged", [1, 2], len(healthy))) == sorted(healthy)
    assert broker.proc.poll() is None


def test_list_offsets_earliest_latest_and_by_timestamp(broker):
    base = 1_700_000_000_000
    stamps = [base + 1000 * (i // 3) for i in range(60)]  # several records per timestamp, rising
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 50})
    for i, ts in enumerate(stamps):
        producer.produce("timed", partition=0, value=b"%d" % i, timestamp=ts)
    producer.flush(30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    assert consumer.get_watermark_offsets(TopicPartition("timed", 0), timeout=10) == (0, 60)
    for query in (base - 5, base, base + 500, base + 7000, base + 19_000, base + 19_001):
        found = consumer.offsets_for_times([TopicPartition("timed", 0, query)], timeout=10)[0].offset
        expected = next((i for i, ts in enumerate(stamps) if ts >= query), -1)
        assert found == expected, (query, found, expected)
    consumer.close()


def test_offset_for_leader_epoch_answers_the_log_end(broker):
    wire = Wire(broker.bootstrap)
    for _ in range(3):
        produce(wire, "epochs", 0, records.encode_batch([records.Record(0, 1, b"k", b"v")]))
    R = OffsetForLeaderEpochRequest[3]
    request = R(replica_id=-1, topics=[R.OffsetForLeaderTopic(topic="epochs", partitions=[
        R.OffsetForLeaderTopic.OffsetForLeaderPartition(partition=p, current_leader_epoch=0, leader_epoch=0)
        for p in (0, 7)])])
    parts = wire.request(request, 3).topics[0].partitions
    assert (parts[0].error_code, parts[0].end_offset) == (0, 3)
    assert parts[1].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
