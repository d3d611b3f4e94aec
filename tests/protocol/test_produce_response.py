"""The Produce response encoded straight to bytes is byte for byte the generated encoder's, and
what the broker answers over the wire decodes as the generated class and kafka-python read it."""
from __future__ import annotations

import asyncio
import struct

import pytest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.server import Server
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.protocol.produce_response import MAX_VERSION, MIN_VERSION, ProducedPartition, ProducedTopic, ProduceResponse
from headwater.records import Record, encode_batch

Generated = MESSAGE_CLASSES[ApiKey.PRODUCE][1]
PartitionResult = Generated.TopicProduceResponse.PartitionProduceResponse
RecordError = PartitionResult.BatchIndexAndErrorMessage

# (index, error, base offset, append time, log start, record errors, message): every shape a produce answers
PARTITIONS = {
    "appended": (0, 0, 41, -1, 0, [], None),
    "appended, LogAppendTime": (1, 0, 7, 1_700_000_000_123, 3, [], None),
    "refused with record errors": (2, 32, -1, -1, 0, [(0, "timestamp 1 is too old"), (5, None)], "timestamp 1 is too old"),
    "refused, a message": (3, 87, -1, -1, -1, [], "cannot append to internal topic 'é'"),
    "denied": (2**31 - 1, 29, -1, -1, -1, [], None),
}


def generated(throttle: int, topics: dict[str, list[tuple]]):
    return Generated(throttle_time_ms=throttle, responses=[Generated.TopicProduceResponse(name=name, partition_responses=[
        PartitionResult(index=p[0], error_code=p[1], base_offset=p[2], log_append_time_ms=p[3], log_start_offset=p[4],
                        record_errors=[RecordError(batch_index=i, batch_index_error_message=m) for i, m in p[5]],
                        error_message=p[6]) for p in partitions]) for name, partitions in topics.items()])


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
def test_every_partition_shape_encodes_as_the_generated_class_does(version):
    topics = {"orders": list(PARTITIONS.values()), "événements": [PARTITIONS["appended"]], "empty": []}
    ours = ProduceResponse([ProducedTopic(name, [ProducedPartition(*p) for p in partitions])
                            for name, partitions in topics.items()], throttle_time_ms=250)
    assert ours.encode(version) == generated(250, topics).encode(version=version)


@pytest.mark.parametrize("version", [3, 8])
def test_generated_topics_in_the_response_encode_the_same(version):
    """The authorization rule adds generated topics (denied partitions, generated record errors)."""
    topics = {"orders": list(PARTITIONS.values())}
    mixed = ProduceResponse(generated(0, topics).responses)
    assert mixed.encode(version) == generated(0, topics).encode(version=version)


def test_versions_not_served_are_refused():
    with pytest.raises(ValueError):
        ProduceResponse([]).encode(9)


def test_the_brokers_answers_decode_as_the_generated_class_and_kafka_python_read_them(tmp_path):
    """Over the wire, one request per shape the handler answers (appended, a LogAppendTime topic,
    a bad timestamp with its record errors, an unknown partition, an internal topic, bad acks):
    the response bytes decode, with the generated class, to what the broker's log says."""
    Request = MESSAGE_CLASSES[ApiKey.PRODUCE][0]
    Data = Request.TopicProduceData
    now = 1_700_000_000_000

    def request(acks: int, topic: str, partition: int, timestamp: int = now):
        batch = encode_batch([Record(0, timestamp, b"k", b"v"), Record(1, timestamp, None, b"w")])
        return Request(transactional_id=None, acks=acks, timeout_ms=30_000, topic_data=[Data(
            name=topic, partition_data=[Data.PartitionProduceData(index=partition, records=batch)])])

    async def scenario():
        broker = Broker(BrokerConfig(data_dir=tmp_path, port=0, flush="never", auto_create_topics=False))
        broker.log_manager.create_topic("plain", 2)
        broker.log_manager.create_topic("stamped", 1, {"message.timestamp.type": "LogAppendTime"})
        broker.log_manager.create_topic("recent", 1, {"message.timestamp.before.max.ms": "1000"})
        server = Server(broker)
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            asked = [request(-1, "plain", 1), request(1, "plain", 1), request(1, "stamped", 0),
                     request(1, "recent", 0, timestamp=1), request(1, "plain", 9), request(1, "__consumer_offsets", 0),
                     request(7, "plain", 0)]
            answers = []
            for correlation, produce in enumerate(asked):
                frame = encode_request(produce, 8, correlation)
                writer.write(struct.pack(">i", len(frame)) + frame)
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                body = await reader.readexactly(size)
                assert struct.unpack(">i", body[:4]) == (correlation,)
                answers.append(Generated.decode(body[4:], version=8).responses[0].partition_responses[0])
            writer.close()
            return answers, broker.log_manager.get_log("plain", 1).log_end_offset
        finally:
            await server.stop()

    answers, end = asyncio.run(scenario())
    fields = [(a.error_code, a.base_offset, a.log_start_offset, a.error_message is not None,
               [r.batch_index for r in a.record_errors]) for a in answers]
    assert end == 4   # two requests of two records each
    assert fields == [(0, 0, 0, False, []), (0, 2, 0, False, []), (0, 0, 0, False, []),
                      (32, -1, 0, True, [0, 1]), (3, -1, -1, False, []), (17, -1, 0, True, []), (21, -1, 0, False, [])]
    assert answers[2].log_append_time_ms > now and answers[0].log_append_time_ms == -1
