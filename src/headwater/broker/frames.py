"""A Kafka connection's socket as whole frames: the size-prefixed requests a client sends, and the
writes of the answers back.

asyncio's StreamReader copied each request three times on its way in (recv's fresh bytes, the
extend into its buffer, `readexactly`'s slice and copy) and woke the connection's task per read.
Here a frame's 4-byte size is read first (checked against the connection's limit before any buffer
is allocated, so a hostile size costs nothing), then the rest of a large frame is received straight
into a buffer of exactly its size. Small frames are gathered from one shared read buffer and copied
out once: one recv for a client's many pipelined requests, not two each. Whole frames are queued
and the task woken once per read. A frame handed out is bytes (copied out of the read buffer) or a
read-only view of a buffer of its own that is never written again, so decoded requests may keep
views into either.
"""
from __future__ import annotations

import asyncio
import collections
import struct
from collections.abc import Callable

import numpy

from headwater.protocol.messages import ProtocolError

_SIZE = struct.Struct(">i")
_SIZE_BYTES = _SIZE.size
# The shared read buffer's size (asyncio's own for a socket's recv): a frame larger than what is
# left of it after its size is received into a buffer of its own.
READ_BUFFER_BYTES = 256 * 1024


class Frames(asyncio.BufferedProtocol):
    """One connection: its frames in order for `read`, its answers out through `write` and `drain`.

    ``max_size`` is the largest frame accepted, read when a frame's size arrives (the server lowers
    it before SASL authentication). Reading pauses while the queued frames hold ``pause_bytes`` or
    more, as a StreamReader paused at twice its limit; a frame itself may be larger.
    ``scratch`` is a view of the read buffer, shared by a loop's connections: each read is parsed
    out of it before the next one."""

    def __init__(self, max_size: int, pause_bytes: int, scratch: memoryview,
                 connected: Callable[[Frames], None] = lambda frames: None) -> None:
        self.max_size, self._pause_bytes, self._scratch, self._connected = max_size, pause_bytes, scratch, connected
        self.transport: asyncio.Transport | None = None
        self._frames: collections.deque[bytes | memoryview] = collections.deque()
        self._queued_bytes = 0
        self._head = bytearray(_SIZE_BYTES)   # a size split between two reads
        self._head_filled = 0
        self._frame: memoryview | None = None  # the frame being received into, once its size is known
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
            return self._frame[self._frame_filled:]
        if self._head_filled:
            return memoryview(self._head)[self._head_filled:]
        return self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._ended is not None:   # after a refused size (a TLS transport may deliver one more read)
            return
        queued = len(self._frames)
        if self._frame is not None:
            self._frame_filled += nbytes
            if self._frame_filled == len(self._frame):
                self._queue(self._frame.toreadonly())
                self._frame = None
        elif self._head_filled:
            self._head_filled += nbytes
            if self._head_filled == _SIZE_BYTES:
                self._head_filled = 0
                (size,) = _SIZE.unpack(self._head)
                if self._accepted(size):
                    self._start_frame(size, self._scratch[:0])
        else:
            self._split(nbytes)
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
        self._frame = None
        self._wake()
        return self._keep_open_at_eof

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ended is None:
            self._ended = exc if exc is not None else asyncio.IncompleteReadError(b"", _SIZE_BYTES)
        # The partial frame's buffer goes now: the transport and this protocol hold each other, so
        # they wait for the cyclic collector, and a hostile size prefix may have made it 100 MiB.
        self._lost, self._frame = True, None
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

    async def read(self) -> bytes | memoryview:
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

    def _split(self, end: int) -> None:
        """Queue the whole frames in a read of ``end`` bytes into the shared buffer; start the last
        one if it is partial."""
        scratch, pos = self._scratch, 0
        while end - pos >= _SIZE_BYTES:
            (size,) = _SIZE.unpack_from(scratch, pos)
            pos += _SIZE_BYTES
            if not self._accepted(size):
                return
            if end - pos < size:
                self._start_frame(size, scratch[pos:end])
                return
            self._queue(scratch[pos:pos + size].tobytes())
            pos += size
        if pos < end:
            self._head[:end - pos] = scratch[pos:end]
            self._head_filled = end - pos

    def _accepted(self, size: int) -> bool:
        """Whether a frame of ``size`` may be read; if not, the connection's reading ends."""
        if 0 <= size <= self.max_size:
            return True
        self._ended = ProtocolError(f"request size {size} is outside 0..{self.max_size} (socket.request.max.bytes)")
        self.transport.pause_reading()   # what follows is not read: the connection closes
        return False

    def _start_frame(self, size: int, received: memoryview) -> None:
        """A frame's size, accepted, has arrived with fewer than all its bytes: its buffer made."""
        # numpy's empty: the frame's bytes are all received into it, so it is not zeroed first (a
        # bytearray's memset took 14-21 us for an 850 KB request)
        self._frame = memoryview(numpy.empty(size, numpy.uint8))
        self._frame[:len(received)] = received
        self._frame_filled = len(received)
        if self._frame_filled == size:   # a frame of 0 bytes, or the rest of a split size
            self._queue(self._frame.toreadonly())
            self._frame = None

    def _queue(self, frame: bytes | memoryview) -> None:
        self._frames.append(frame)
        self._queued_bytes += len(frame)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
