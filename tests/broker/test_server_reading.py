"""How the server reads a request off the socket: a large produce request (librdkafka's are
550-850 KB) is read whole without pausing the socket between its recv calls, and a request that
trickles in, split anywhere, is read as the same request."""
import asyncio
import socket
import struct

from kafka.protocol.metadata import MetadataRequest

from headwater.broker.frames import Frames
from headwater.fuzzing.corpus import encode_request
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.records import Record, encode_batch, iter_batches
from tests.broker.test_server_turns import answer, correlation_id, serve

Produce, ProduceResponse = MESSAGE_CLASSES[ApiKey.PRODUCE]


def sized(frame: bytes) -> bytes:
    return struct.pack(">i", len(frame)) + frame


def framed(values: list[bytes], cid: int) -> bytes:
    batch = encode_batch([Record(i, 1_700_000_000_000, None, v) for i, v in enumerate(values)])
    request = Produce(transactional_id=None, acks=1, timeout_ms=30_000, topic_data=[Produce.TopicProduceData(
        name="quiet", partition_data=[Produce.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    return sized(encode_request(request, 7, cid))


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


def test_a_client_that_stops_reading_is_not_served_further_and_others_are(tmp_path, monkeypatch):
    """Its answers fill the socket: the server's writes pause and it serves that connection no more
    requests until they resume (the drain waits), while another connection is served; once the
    client reads again, every answer arrives, in order."""
    paused = []
    real_pause = Frames.pause_writing

    def pause_writing(frames):
        paused.append(frames)
        real_pause(frames)
    monkeypatch.setattr(Frames, "pause_writing", pause_writing)

    def served() -> int:
        latency = broker_of[0].stats.requests.get(ApiKey.METADATA)
        return sum(latency.counts) if latency else 0
    broker_of = []

    async def scenario(broker, reader, writer):
        broker_of.append(broker)
        port = writer.get_extra_info("peername")[1]
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)   # its window fills fast
        sock.connect(("127.0.0.1", port))
        sock.setblocking(False)
        stuck_reader, stuck = await asyncio.open_connection(sock=sock)
        stuck.transport.pause_reading()   # this client reads nothing
        sent = 0
        while not paused:   # until the broker's send buffer and the client's window are full
            assert sent < 200_000
            stuck.write(b"".join(sized(encode_request(MetadataRequest[1](topics=None), 1, sent + i)) for i in range(2_000)))
            sent += 2_000
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        before = served()
        stuck.write(b"".join(sized(encode_request(MetadataRequest[1](topics=None), 1, i)) for i in range(50)))
        writer.write(framed([b"value"], 4_321))   # the other connection
        await writer.drain()
        assert await answered(reader) == (4_321, 0)
        assert served() == before   # nothing more served on the stuck connection
        stuck.transport.resume_reading()
        cids = [correlation_id(bytes(await answer(stuck_reader))) for _ in range(sent + 50)]
        assert cids == list(range(sent)) + list(range(50))
        stuck.close()
        writer.close()
    serve(tmp_path, scenario)
