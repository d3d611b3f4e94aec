"""A connection with requests already buffered is served for its turn before a woken fetch runs:
librdkafka sends one produce request per partition, and a wide fetch woken between each two of
them would answer all its partitions for one record each time (issue #27)."""
import asyncio
import struct

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.server import Server
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.fetch_response import MAX_VERSION
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch, iter_batches

PARTITIONS = 8
(Fetch, FetchResponse), Produce = MESSAGE_CLASSES[ApiKey.FETCH], MESSAGE_CLASSES[ApiKey.PRODUCE][0]


def framed(request, version: int, correlation_id: int) -> bytes:
    frame = encode_request(request, version, correlation_id)
    return struct.pack(">i", len(frame)) + frame


def produce(partition: int) -> Produce:
    batch = encode_batch([Record(0, 1_700_000_000_000, None, b"record %d" % partition)])
    return Produce(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[Produce.TopicProduceData(
        name="wide", partition_data=[Produce.TopicProduceData.PartitionProduceData(index=partition, records=batch)])])


def wide_fetch() -> Fetch:
    Topic = Fetch.FetchTopic
    return Fetch(replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                 session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[Topic(
                     topic="wide", partitions=[Topic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                                    log_start_offset=-1, partition_max_bytes=1 << 20)
                                               for p in range(PARTITIONS)])])


async def answer(reader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


def test_pipelined_produce_requests_are_served_before_the_fetch_they_wake(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig(data_dir=tmp_path, port=0, flush="never"))
        broker.log_manager.create_topic("wide", PARTITIONS)
        server = Server(broker, turn_s=3600)   # a turn no slow machine outlasts: the test counts, never times
        port = await server.start()
        try:
            consumer = await asyncio.open_connection("127.0.0.1", port)
            producer = await asyncio.open_connection("127.0.0.1", port)
            consumer[1].write(framed(wide_fetch(), MAX_VERSION, 1))
            await consumer[1].drain()
            while not len(broker.wakeups):   # the fetch found nothing and waits
                await asyncio.sleep(0.01)
            producer[1].write(b"".join(framed(produce(p), 7, 10 + p) for p in range(PARTITIONS)))
            for _ in range(PARTITIONS):
                await answer(producer[0])
            response = FetchResponse.decode(bytes(await answer(consumer[0]))[4:], version=MAX_VERSION)
            fetched = {p.partition_index: len(list(iter_batches(p.records))) for t in response.responses
                       for p in t.partitions}
            assert fetched == dict.fromkeys(range(PARTITIONS), 1)
            for _, writer in (consumer, producer):
                writer.close()
        finally:
            await server.stop()
    asyncio.run(scenario())
