"""A Kafka connection's socket as whole frames: the size-prefixed requests a client sends, and the
writes of the answers back.

asyncio's StreamReader copied each request three times on its way in (recv's fresh bytes, the
extend into its buffer, `readexactly`'s slice and copy) and woke the connection's task per read.
Here a frame's 4-byte size is read first (checked against the connection's limit before any buffer
is allocated, so a hostile size costs nothing), then the rest of a large frame is received straight
into a buffer of exactly its size. Small frames are gathered from one shared read buffer and copied
out once: one recv for a client's many pipelined requests, not two each. Whole frames are queued
and the task woken once per read. Every frame handed out is a read-only view of a buffer that is
never written again, so decoded requests may keep views into it.
"""
from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable

from headwater.protocol.messages import ProtocolError

_SIZE_BYTES = 4
# The shared read buffer's size (asyncio's own for a socket's recv): a frame larger than what is
# left of it after its size is received into a buffer of its own.
READ_BUFFER_BYTES = 256 * 1024


class Frames(asyncio.BufferedProtocol):
    """One connection: its frames in order for `read`, its answers out through `write` and `drain`.

    ``max_size`` is the largest frame accepted, read when a frame's size arrives (the server lowers
    it before SASL authentication). Reading pauses while the queued frames hold ``pause_bytes`` or
    more, as a StreamReader paused at twice its limit; a frame itself may be larger.
    ``scratch`` is the read buffer, shared by a loop's connections: each read is parsed out of it
    before the next one."""

    def __init__(self, max_size: int, pause_bytes: int, scratch: bytearray,
                 connected: Callable[[Frames], None] = lambda frames: None) -> None:
        self.max_size, self._pause_bytes, self._scratch, self._connected = max_size, pause_bytes, scratch, connected
        self.transport: asyncio.Transport | None = None
        self._frames: collections.deque[memoryview] = collections.deque()
        self._queued_bytes = 0
        self._head = bytearray(_SIZE_BYTES)   # a size split between two reads
        self._head_filled = 0
        self._frame: bytearray | None = None  # the frame being received into, once its size is known
        self._frame_filled = 0
        self._ended: Exception | None = None  # what `read` raises once the queued frames are taken
        self._reading_paused = self._writing_paused = self._lost = False
        self._waiter: asyncio.Future | None = None   # the task waiting for a frame or for a drain
        self._keep_open_at_eof = True

    # asyncio.BufferedProtocol

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        # Over TLS the transport must close at EOF; over TCP the answers already served still leave.
        self._keep_open_at_eof = transport.get_extra_info("sslcontext") is None
        self._connected(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._frame_filled:]
        if self._head_filled:
            return memoryview(self._head)[self._head_filled:]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        queued = len(self._frames)
        if self._frame is not None:
            self._frame_filled += nbytes
            if self._frame_filled == len(self._frame):
                self._queue_frame()
        elif self._head_filled:
            self._head_filled += nbytes
            if self._head_filled == _SIZE_BYTES:
                self._head_filled = 0
                self._start_frame(int.from_bytes(self._head, "big", signed=True), memoryview(b""))
        else:
            self._split(memoryview(self._scratch)[:nbytes])
        if len(self._frames) > queued or self._ended is not None:
            self._wake()
        if self._queued_bytes >= self._pause_bytes and not self._reading_paused and self._ended is None:
            self._reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        if self._ended is None:
            partial = bytes(self._head[:self._head_filled]) if self._head_filled else \
                bytes(self._frame[:self._frame_filled]) if self._frame is not None else b""
            expected = len(self._frame) if self._frame is not None else _SIZE_BYTES
            self._ended = asyncio.IncompleteReadError(partial, expected)
        self._wake()
        return self._keep_open_at_eof

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ended is None:
            self._ended = exc if exc is not None else asyncio.IncompleteReadError(b"", _SIZE_BYTES)
        self._lost = True
        self._writing_paused = False
        self._wake()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake()

    # The connection's task

    @property
    def buffered(self) -> bool:
        """Whether a whole frame is queued, so `read` will not wait."""
        return bool(self._frames)

    async def read(self) -> memoryview:
        """The next frame (without its size); raises what ended the connection once none is left:
        IncompleteReadError at EOF, ProtocolError for a size out of bounds, the socket's error."""
        while not self._frames:
            if self._ended is not None:
                raise self._ended
            await self._wait()
        frame = self._frames.popleft()
        self._queued_bytes -= len(frame)
        if self._reading_paused and self._queued_bytes < self._pause_bytes:
            self._reading_paused = False
            self.transport.resume_reading()
        return frame

    def write(self, answers: list[bytes]) -> None:
        self.transport.writelines(answers)

    async def drain(self) -> None:
        """Wait while the transport's write buffer is above its high-water mark."""
        while self._writing_paused:
            await self._wait()
        if self._lost:
            raise ConnectionResetError("Connection lost")

    # Reading

    def _split(self, data: memoryview) -> None:
        """Queue the whole frames in one read of the shared buffer; start the last one if partial."""
        pos, end = 0, len(data)
        while self._ended is None and end - pos >= _SIZE_BYTES:
            size = int.from_bytes(data[pos:pos + _SIZE_BYTES], "big", signed=True)
            pos += _SIZE_BYTES
            taken = min(max(size, 0), end - pos)
            self._start_frame(size, data[pos:pos + taken])
            pos += taken
        if self._ended is None and pos < end:
            self._head[:end - pos] = data[pos:]
            self._head_filled = end - pos

    def _start_frame(self, size: int, received: memoryview) -> None:
        """A frame's size has arrived, with the first of its bytes: checked, then its buffer made."""
        if size < 0 or size > self.max_size:
            self._ended = ProtocolError(f"request size {size} is outside 0..{self.max_size} (socket.request.max.bytes)")
            self.transport.pause_reading()   # what follows is not read: the connection closes
            return
        self._frame = bytearray(received) if len(received) == size else bytearray(size)
        if len(received) < size:
            self._frame[:len(received)] = received
        self._frame_filled = len(received)
        if self._frame_filled == size:
            self._queue_frame()

    def _queue_frame(self) -> None:
        frame = memoryview(self._frame).toreadonly()
        self._frames.append(frame)
        self._queued_bytes += len(frame)
        self._frame = None

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
