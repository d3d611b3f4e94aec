"""A connection with requests already buffered is served for its turn before a woken fetch runs:
librdkafka sends one produce request per partition, and a wide fetch woken between each two of
them would answer all its partitions for one record each time (issue #27). The answers of
requests served in one go leave in one write, in order, and never wait behind a request that
waits (a long-polling fetch)."""
import asyncio
import collections
import struct

import pytest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.server import Server
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.fetch_response import MAX_VERSION
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch, iter_batches

PARTITIONS = 8
(Fetch, FetchResponse), (Produce, ProduceResponse) = MESSAGE_CLASSES[ApiKey.FETCH], MESSAGE_CLASSES[ApiKey.PRODUCE]


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



@pytest.fixture
def counted_writes(monkeypatch):
    """The bytes of each write to a socket transport, by transport (each write is a send syscall
    when nothing is queued); the write itself is the real one."""
    from asyncio.selector_events import _SelectorSocketTransport
    writes, real = collections.defaultdict(list), _SelectorSocketTransport.write

    def write(transport, data):
        writes[transport].append(len(data))
        return real(transport, data)
    monkeypatch.setattr(_SelectorSocketTransport, "write", write)
    return writes


def serve(tmp_path, scenario, flush: str = "never"):
    async def run():
        broker = Broker(BrokerConfig(data_dir=tmp_path, port=0, flush=flush))
        broker.log_manager.create_topic("wide", PARTITIONS)
        broker.log_manager.create_topic("quiet", 1)
        server = Server(broker, turn_s=3600)   # a turn no slow machine outlasts: the test counts, never times
        port = await server.start()
        try:
            await scenario(broker, *await asyncio.open_connection("127.0.0.1", port))
        finally:
            await server.stop()
    asyncio.run(run())


def correlation_id(frame: bytes) -> int:
    return struct.unpack_from(">i", frame)[0]


def test_pipelined_produce_requests_are_answered_in_order_with_one_write(tmp_path, counted_writes):
    async def scenario(broker, reader, writer):
        writer.write(b"".join(framed(produce(p), 7, 100 + p) for p in range(PARTITIONS)))
        await writer.drain()
        frames = [bytes(await answer(reader)) for _ in range(PARTITIONS)]
        assert [correlation_id(f) for f in frames] == [100 + p for p in range(PARTITIONS)]
        answered = [ProduceResponse.decode(f[4:], version=7).responses[0].partition_responses[0] for f in frames]
        assert [(a.index, a.error_code) for a in answered] == [(p, 0) for p in range(PARTITIONS)]
        stored = {p: len(list(iter_batches(bytes(broker.log_manager.get_log("wide", p).read(0, 1 << 20)))))
                  for p in range(PARTITIONS)}
        assert stored == dict.fromkeys(range(PARTITIONS), 1)
        # the requests arrived together, so they were served in one go: their answers in one write
        del counted_writes[writer.transport]   # the client's own
        assert list(counted_writes.values()) == [[sum(4 + len(f) for f in frames)]]
        writer.close()
    serve(tmp_path, scenario)


def test_durable_produce_answers_are_not_held_for_the_next_ones_fsync(tmp_path, counted_writes):
    """Under --flush always an acks=all produce waits for its fsync round: the answer before it
    leaves first, not a round later."""
    async def scenario(broker, reader, writer):
        durable = [produce(p) for p in range(3)]
        for request in durable:
            request.acks = -1
        writer.write(b"".join(framed(request, 7, p) for p, request in enumerate(durable)))
        await writer.drain()
        assert [correlation_id(await answer(reader)) for _ in durable] == [0, 1, 2]
        del counted_writes[writer.transport]
        assert [len(sizes) for sizes in counted_writes.values()] == [3]
        writer.close()
    serve(tmp_path, scenario, flush="always")


def test_a_lone_request_is_answered_at_once(tmp_path):
    async def scenario(broker, reader, writer):
        for p in range(3):   # each waits for its answer before the next is sent: none may be held
            writer.write(framed(produce(p), 7, p))
            await writer.drain()
            assert correlation_id(await asyncio.wait_for(answer(reader), 60)) == p
        writer.close()
    serve(tmp_path, scenario)


def test_an_answer_is_not_held_behind_a_waiting_fetch(tmp_path):
    async def scenario(broker, reader, writer):
        fetch = wide_fetch()
        fetch.max_wait_ms, fetch.topics[0].topic = 10_000, "quiet"
        fetch.topics[0].partitions = fetch.topics[0].partitions[:1]
        writer.write(framed(produce(0), 7, 1) + framed(fetch, 11, 2))
        await writer.drain()
        assert correlation_id(await answer(reader)) == 1
        assert len(broker.wakeups) == 1   # the fetch behind it still waits
        broker.appender.append("quiet", 0, produce(0).topic_data[0].partition_data[0].records)
        assert correlation_id(await answer(reader)) == 2
        writer.close()
    serve(tmp_path, scenario)
