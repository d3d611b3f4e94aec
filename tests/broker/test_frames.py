"""The Kafka listener's frame reader (broker/frames.py): frames come out whole and in order however
the bytes arrive, a large frame is received straight into its own buffer, a size out of bounds is
refused before anything is allocated, and reading pauses while the queued frames are many."""
import asyncio
import struct
import tracemalloc

import pytest

from headwater.broker.frames import READ_BUFFER_BYTES, Frames
from headwater.protocol.messages import ProtocolError


class Transport:
    """Stands for the socket transport: delivers bytes through get_buffer/buffer_updated as a
    recv_into does, at most one buffer per read."""
    def __init__(self):
        self.reading, self.pauses, self.reads = True, 0, 0

    def get_extra_info(self, name, default=None):
        return default

    def pause_reading(self):
        self.reading, self.pauses = False, self.pauses + 1

    def resume_reading(self):
        self.reading = True


def connected(max_size: int = 1 << 24, pause_bytes: int = 1 << 24) -> tuple[Frames, Transport]:
    frames, transport = Frames(max_size, pause_bytes, memoryview(bytearray(READ_BUFFER_BYTES))), Transport()
    frames.connection_made(transport)
    return frames, transport


def deliver(frames: Frames, data: bytes) -> None:
    """One read's bytes, received as the transport would: as many recv_into calls as they need."""
    view = memoryview(data)
    while view:
        buffer = frames.get_buffer(-1)
        n = min(len(buffer), len(view))
        buffer[:n] = view[:n]
        frames.transport.reads += 1
        frames.buffer_updated(n)
        view = view[n:]


def sized(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def read_all(frames: Frames, count: int) -> list[bytes]:
    async def read():
        return [bytes(await asyncio.wait_for(frames.read(), 5)) for _ in range(count)]
    return asyncio.run(read())


def read_while_waiting(frames: Frames, data: bytes) -> bytes:
    """The frame a task waiting to read gets once ``data`` arrives (or what it raises)."""
    async def read():
        waiting = asyncio.ensure_future(frames.read())
        await asyncio.sleep(0)
        deliver(frames, data)
        return bytes(await asyncio.wait_for(waiting, 5))
    return asyncio.run(read())


BODIES = [b"first request", b"", b"x" * 300, bytes(range(256)) * 3]


def test_frames_split_at_every_byte_boundary_come_out_whole():
    stream = b"".join(sized(body) for body in BODIES)
    for cut in range(1, len(stream)):
        frames, _ = connected()
        deliver(frames, stream[:cut])
        deliver(frames, stream[cut:])
        assert read_all(frames, len(BODIES)) == BODIES, cut


def test_many_frames_in_one_read_are_queued_by_one_recv():
    bodies = [b"request %d" % i for i in range(500)]
    frames, transport = connected()
    deliver(frames, b"".join(sized(body) for body in bodies))
    assert transport.reads == 1 and frames.buffered
    assert read_all(frames, len(bodies)) == bodies
    assert not frames.buffered
    assert read_while_waiting(frames, sized(b"woken")) == b"woken"


def test_a_frame_larger_than_the_read_buffer_is_received_into_its_own_buffer():
    large = bytes(range(251)) * (3 * READ_BUFFER_BYTES // 251)
    frames, transport = connected()
    deliver(frames, sized(b"small") + sized(large) + sized(b"after"))
    # the read buffer holds the start of the large frame; the rest goes straight to its own buffer, in one recv
    assert transport.reads == 3
    assert read_all(frames, 3) == [b"small", large, b"after"]


def test_a_frame_received_into_its_own_buffer_is_read_only():
    frames, _ = connected()
    deliver(frames, sized(b"request")[:6])
    deliver(frames, sized(b"request")[6:])

    async def read():
        return await frames.read()
    frame = asyncio.run(read())
    with pytest.raises(TypeError):
        frame[0] = 0


@pytest.mark.parametrize("size", [-1, 512 * 1024 + 1, 2**31 - 1])
def test_a_size_out_of_bounds_is_refused_before_its_buffer_is_allocated(size):
    frames, transport = connected(max_size=512 * 1024)
    tracemalloc.start()
    try:
        deliver(frames, sized(b"before") + struct.pack(">i", size) + b"more")
        deliver(frames, sized(b"after"))   # never read: the connection closes
        assert tracemalloc.get_traced_memory()[1] < 64 * 1024   # no buffer for it
    finally:
        tracemalloc.stop()
    assert not transport.reading
    assert read_all(frames, 1) == [b"before"]   # the frames before it are served first
    with pytest.raises(ProtocolError, match="outside"):
        read_all(frames, 1)
    waiting, _ = connected(max_size=512 * 1024)
    with pytest.raises(ProtocolError, match="outside"):   # a task waiting for a frame is woken to close
        read_while_waiting(waiting, struct.pack(">i", size))


def test_eof_mid_frame_ends_the_reading_with_what_came():
    frames, _ = connected()
    deliver(frames, sized(b"whole") + sized(b"cut short")[:7])
    frames.eof_received()
    assert read_all(frames, 1) == [b"whole"]
    with pytest.raises(asyncio.IncompleteReadError) as raised:
        read_all(frames, 1)
    assert (raised.value.partial, raised.value.expected) == (b"cut", len(b"cut short"))


def test_reading_pauses_while_the_queued_frames_are_many_and_resumes_as_they_are_taken():
    frames, transport = connected(pause_bytes=1000)
    deliver(frames, b"".join(sized(b"y" * 300) for _ in range(4)))
    assert not transport.reading   # 1,200 bytes queued
    read_all(frames, 1)
    assert transport.reading   # 900 queued: under the limit again
    assert transport.pauses == 1
    frames2, transport2 = connected(pause_bytes=1000)
    deliver(frames2, b"".join(sized(b"y" * 300) for _ in range(3)))
    assert transport2.reading
