"""What a request no longer works out afresh, decided once per connection or per config, still
follows every change: a topic's append rules (kept per LogConfig) after AlterConfigs and after the
broker's message.max.bytes or topic defaults change; a client quota set, and then removed, while a connection is
open applies to that connection's next request."""
import asyncio
import dataclasses
import struct

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.server import Server
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.protocol.quota_names import PRODUCER_BYTE_RATE
from headwater.records import Record, encode_batch, iter_batches
from tests.support.appender_fixtures import appender  # noqa: F401  (the fixture)

T0 = 1_700_000_000_000
Produce, ProduceResponse = MESSAGE_CLASSES[ApiKey.PRODUCE]


def one_record(size: int = 10) -> bytes:
    return encode_batch([Record(0, T0, None, b"x" * size)])


def test_a_changed_timestamp_type_applies_to_the_next_append(appender):  # noqa: F811
    manager = appender.log_manager
    manager.create_topic("t", 1)
    assert appender.append("t", 0, one_record()).log_append_time == -1
    manager.alter_topic_configs("t", {"message.timestamp.type": "LogAppendTime"}, incremental=True)
    stamped = appender.append("t", 0, one_record())
    assert stamped.error == ErrorCode.NONE and stamped.log_append_time > T0
    manager.alter_topic_configs("t", {}, incremental=False)   # back to the default, CreateTime
    assert appender.append("t", 0, one_record()).log_append_time == -1
    batches = [header for _, _, header in manager.topics["t"].partitions[0].batches(0)]
    assert [h.max_timestamp == T0 for h in batches] == [True, False, True]


def test_a_topics_changed_rules_apply_to_the_next_append(appender):  # noqa: F811
    manager = appender.log_manager
    manager.create_topic("t", 1)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.NONE
    manager.alter_topic_configs("t", {"max.message.bytes": "500"}, incremental=True)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.MESSAGE_TOO_LARGE
    manager.alter_topic_configs("t", {"cleanup.policy": "compact"}, incremental=False)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.INVALID_RECORD   # no key
    manager.alter_topic_configs("t", {}, incremental=False)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.NONE


def test_changed_broker_defaults_apply_to_the_next_append(appender):  # noqa: F811
    manager = appender.log_manager
    manager.create_topic("t", 1)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.NONE
    manager.set_defaults(dataclasses.replace(manager.defaults, max_message_bytes=500))
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.MESSAGE_TOO_LARGE


def test_a_lowered_message_max_bytes_applies_to_the_next_append(appender):  # noqa: F811
    appender.log_manager.create_topic("t", 1)
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.NONE
    appender.config.message_max_bytes = 500
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.MESSAGE_TOO_LARGE
    appender.config.message_max_bytes = 1 << 20
    assert appender.append("t", 0, one_record(1000)).error == ErrorCode.NONE


def framed_produce(correlation_id: int) -> bytes:
    request = Produce(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[Produce.TopicProduceData(
        name="t", partition_data=[Produce.TopicProduceData.PartitionProduceData(index=0, records=one_record(1000))])])
    frame = encode_request(request, 8, correlation_id)
    return struct.pack(">i", len(frame)) + frame


def test_a_quota_set_while_a_connection_is_open_throttles_its_next_request(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig(data_dir=tmp_path, port=0, flush="never"))
        broker.log_manager.create_topic("t", 1)
        server = Server(broker)
        port = await server.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)

            async def throttle_ms(correlation_id: int) -> int:
                writer.write(framed_produce(correlation_id))
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                response = ProduceResponse.decode((await reader.readexactly(size))[4:], version=8)
                assert [p.error_code for t in response.responses for p in t.partition_responses] == [0]
                return response.throttle_time_ms

            assert await throttle_ms(1) == 0
            # 100 bytes a second: the bucket holds 100, a request of ~1 KB leaves ~9 s of debt
            broker.quotas.alter(None, {PRODUCER_BYTE_RATE: 100})
            assert await throttle_ms(2) > 1000
            broker.quotas.alter(None, {PRODUCER_BYTE_RATE: None})
            assert await throttle_ms(3) == 0
            writer.close()
        finally:
            await server.stop()
    asyncio.run(asyncio.wait_for(scenario(), 60))
