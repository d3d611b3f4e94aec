"""The codecs of a batch's records section, with decompression bounded so a small batch cannot
fill memory (a decompression bomb).

cramjam makes a codec context on every call (~20 µs for zstd, ~10 for lz4 whatever the size, ~20 to
compress zstd): LZ4 and ZSTD bodies are decompressed by python-lz4 and python-zstandard with a
context kept per thread (the event loop and the validator thread both decompress; a context is
not thread-safe). What those fast paths do not settle (a body past the first buffer, several
frames, a corrupt one) goes to cramjam's bounded path as before, whose answer stands. Small
bodies are compressed to zstd the same way; LZ4 compression stays cramjam's (python-lz4's
liblz4 compresses some inputs to other bytes, which would change what the broker stores)."""
from __future__ import annotations

import struct
import threading
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from .errors import InvalidRecordError


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_BLOCK = struct.Struct(">i")


def _snappy_blocks(data: bytes) -> list[bytes]:
    # Java clients frame snappy the xerial way (magic, versions, then length-prefixed blocks).
    if not data.startswith(_XERIAL_MAGIC):
        return [data]
    blocks, pos = [], 16
    while pos < len(data):
        if pos + 4 > len(data):
            raise InvalidRecordError("truncated xerial snappy block")
        (length,) = _XERIAL_BLOCK.unpack_from(data, pos)
        if length < 0 or pos + 4 + length > len(data):
            raise InvalidRecordError(f"xerial snappy block of {length} bytes does not fit the batch")
        blocks.append(data[pos + 4:pos + 4 + length])
        pos += 4 + length
    return blocks


def _snappy_decompress(data: bytes, limit: int | None) -> bytes:
    blocks = _snappy_blocks(data)
    if limit is not None:
        # Raw snappy states its output length up front: refuse before allocating.
        size = sum(cramjam.snappy.decompress_raw_len(block) for block in blocks)
        if size > limit:
            raise InvalidRecordError(f"the batch decompresses to {size} bytes, over the limit of {limit}")
    return b"".join(bytes(cramjam.snappy.decompress_raw(block)) for block in blocks)


_STREAMED = {Compression.GZIP: cramjam.gzip, Compression.LZ4: cramjam.lz4, Compression.ZSTD: cramjam.zstd}
_FIRST_GUESS = 4  # the output buffer starts at this multiple of the input; most batches fit at once


def _first_size(data, limit: int | None) -> int:
    size = max(1 << 16, _FIRST_GUESS * len(data))
    return size if limit is None else min(limit, size)


class _Contexts(threading.local):
    """This thread's codec contexts, made on its first use of them."""

    def __init__(self) -> None:
        self.zstd_in = zstandard.ZstdDecompressor()
        self.zstd_out = zstandard.ZstdCompressor(level=3)  # Kafka's and cramjam's default level
        self.lz4_in = lz4.frame.create_decompression_context()


_contexts = _Contexts()
# Up to one block python-zstandard writes the frame cramjam wrote, byte for byte (the tests hold
# them equal): what the broker stores does not change. Past it their chunking differs.
_ZSTD_SAME_BYTES = 1 << 17


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_ZSTD_AT_ONCE_BLOCKS = 256  # a frame of more blocks (a bomb of tiny ones, or ~32 MiB) goes to cramjam


def _zstd_frame_end(data) -> int:
    """Where the zstd frame at the start of ``data`` ends, read from its block headers (-1 past
    _ZSTD_AT_ONCE_BLOCKS blocks or if it does not fit): python-zstandard's one-shot decompress
    ignores what follows a frame that does not state its size (as Kafka's and librdkafka's
    dynamic builds write them), so this says whether the frame is all there is."""
    pos = zstandard.frame_header_size(data)
    for _ in range(_ZSTD_AT_ONCE_BLOCKS):
        if pos + 3 > len(data):
            break
        header = data[pos] | data[pos + 1] << 8 | data[pos + 2] << 16
        kind, size = header >> 1 & 3, header >> 3
        if kind == 3:  # reserved
            break
        pos += 3 + (1 if kind == 1 else size)  # an RLE block holds one byte
        if header & 1:  # the last block
            return pos + 4 * zstandard.get_frame_parameters(data).has_checksum
    return -1


def _zstd_at_once(data, limit: int | None) -> bytes | None:
    """One whole zstd frame, decompressed into the size it states (within ``limit``) or, if it
    states none, into buffers grown as the general path grows its own; else None: anything else
    (several frames, a skippable one, a corrupt one, one past the limit) is for the general path
    to settle and word. Never allocates past the limit: python-zstandard allocates each size whole."""
    try:
        stated = zstandard.frame_content_size(data)  # -1: not stated
        ceiling = _first_size(data, None) if limit is None else limit
        # A stated 0 is not decoded at all by python-zstandard: the general path checks it.
        if data[:4] != _ZSTD_MAGIC or stated == 0 or stated > ceiling or _zstd_frame_end(data) != len(data):
            return None
    except zstandard.ZstdError:
        return None
    size = stated if stated > 0 else _first_size(data, limit)
    while True:
        try:
            return _contexts.zstd_in.decompress(data, max_output_size=size)
        except zstandard.ZstdError:
            if stated > 0 or size >= ceiling:
                return None
            size = min(ceiling, size * 4)


def _lz4_at_once(data, limit: int | None) -> bytes | None:
    """One whole LZ4 frame that decompresses within the general path's first buffer, or None
    (see _zstd_at_once). python-lz4 copies its buffer out into the bytes it returns, so the
    buffer is held to half the limit: the two together stay within it."""
    context = _contexts.lz4_in
    lz4.frame.reset_decompression_context(context)  # a previous call may have left it mid-frame
    size = _first_size(data, None if limit is None else limit // 2)
    try:
        out, read, ended = lz4.frame.decompress_chunk(context, data, max_length=size)
    except RuntimeError:
        return None
    return out if ended and read == len(data) else None


_AT_ONCE = {Compression.LZ4: _lz4_at_once, Compression.ZSTD: _zstd_at_once}


def _decompress_bounded(codec, data, limit: int):
    """Decompress into a buffer grown up to ``limit`` bytes: memory stays bounded by the limit
    however small the input (a bomb), and what needs more is refused."""
    size = _first_size(data, limit)
    while True:
        out = bytearray(size)
        try:
            return memoryview(out)[:codec.decompress_into(data, out)]
        except cramjam.DecompressionError as exc:
            # Either the buffer is too small or the data is corrupt: cramjam does not say which
            # in a stable way, so grow until the limit and let the last attempt decide.
            if size >= limit:
                raise InvalidRecordError(f"the batch does not decompress within {limit} bytes: {exc}") from None
            size = min(limit, size * 4)


def decompress(codec: Compression, data, limit: int | None = None):
    """The records section of a batch, uncompressed; with ``limit``, refused past that many bytes."""
    if codec == Compression.NONE:
        return data
    try:
        if codec == Compression.SNAPPY:
            return _snappy_decompress(bytes(data), limit)
        at_once = _AT_ONCE.get(codec)
        out = at_once(data, limit) if at_once else None
        if out is not None:
            return out
        if limit is not None:
            return _decompress_bounded(_STREAMED[codec], data, limit)
        return bytes(_STREAMED[codec].decompress(data))
    except cramjam.DecompressionError as exc:
        raise InvalidRecordError(f"cannot decompress the batch ({codec.name.lower()}): {exc}") from None


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.ZSTD and len(data) <= _ZSTD_SAME_BYTES:
        return _contexts.zstd_out.compress(data)
    return bytes(_STREAMED[codec].compress(data))
