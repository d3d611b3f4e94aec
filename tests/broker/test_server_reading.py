"""How the server reads a request off the socket: a large produce request (librdkafka's are
550-850 KB) is read whole without pausing the socket between its recv calls, and a request that
trickles in, split anywhere, is read as the same request."""
import asyncio
import struct

from headwater.fuzzing.corpus import encode_request
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch, iter_batches
from tests.broker.test_server_turns import answer, correlation_id, serve

Produce, ProduceResponse = MESSAGE_CLASSES[ApiKey.PRODUCE]


def framed(values: list[bytes], cid: int) -> bytes:
    batch = encode_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])
    request = Produce(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[Produce.TopicProduceData(
        name="quiet", partition_data=[Produce.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    frame = encode_request(request, 7, cid)
    return struct.pack(">i", len(frame)) + frame


async def answered(reader) -> tuple[int, int]:
    """(correlation id, the partition's error code) of a produce response."""
    frame = bytes(await answer(reader))
    return correlation_id(frame), ProduceResponse.decode(frame[4:], version=7).responses[0].partition_responses[0].error_code


def stored(broker) -> list[int]:
    """The records of each batch in the partition."""
    log = broker.log_manager.get_log("quiet", 0)
    return [header.last_offset_delta + 1 for _, header in iter_batches(bytes(log.read(0, 1 << 24)))]


def test_a_large_request_is_read_whole_without_pausing_the_socket(tmp_path, monkeypatch):
    from asyncio.selector_events import _SelectorSocketTransport
    pauses, real = [], _SelectorSocketTransport.pause_reading

    def pause_reading(transport):
        pauses.append(transport)
        return real(transport)
    monkeypatch.setattr(_SelectorSocketTransport, "pause_reading", pause_reading)

    async def scenario(broker, reader, writer):
        values = [b"%06d" % i + b"x" * 94 for i in range(7_000)]   # ~850 KB, as librdkafka's largest
        writer.write(framed(values, 7))
        await writer.drain()
        assert await answered(reader) == (7, 0)
        assert stored(broker) == [7_000]
        assert [t for t in pauses if t is not writer.transport] == []   # the server's side never paused
        writer.close()
    serve(tmp_path, scenario)


def test_a_request_split_at_every_byte_is_read_right(tmp_path):
    async def scenario(broker, reader, writer):
        whole = framed([b"value"], 0)
        for cut in range(1, len(whole)):
            frame = framed([b"value"], cut)
            for part in (frame[:cut], frame[cut:]):
                writer.write(part)
                await writer.drain()
                await asyncio.sleep(0)   # the server reads the first part alone
            assert await answered(reader) == (cut, 0)
        assert stored(broker) == [1] * (len(whole) - 1)
        writer.close()
    serve(tmp_path, scenario)
