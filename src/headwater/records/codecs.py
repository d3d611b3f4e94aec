"""The codecs of a batch's records section, with decompression bounded so a small batch cannot
fill memory (a decompression bomb)."""
from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

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


def _decompress_bounded(codec, data, limit: int):
    """Decompress into a buffer grown up to ``limit`` bytes: memory stays bounded by the limit
    however small the input (a bomb), and what needs more is refused."""
    size = min(limit, max(1 << 16, _FIRST_GUESS * len(data)))
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
    return bytes(_STREAMED[codec].compress(data))
