"""Kafka record batches (magic v2): the unit the log stores and the wire carries.

The broker's hot path touches only the 61-byte batch header (validate the CRC, stamp the
base offset); opening the records inside (decompress, decode) is for the few places that
need keys and values: the log cleaner, internal topics, tools and tests.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import cramjam
import crc32c

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of the header outside batchLength
CRC_START = 21  # the CRC covers attributes .. end of batch
MAGIC = 2
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CorruptRecordError(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch, header included."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the header of the batch at ``pos``; raises CorruptRecordError if truncated."""
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"truncated batch header at byte {pos}")
    return BatchHeader(*HEADER.unpack_from(buf, pos))


def validate_batch(buf, pos: int = 0) -> BatchHeader:
    """Check framing, magic and CRC-32C of the batch at ``pos`` and return its header."""
    header = read_header(buf, pos)
    if header.magic != MAGIC:
        raise CorruptRecordError(f"unsupported record batch magic {header.magic}")
    if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or pos + header.size > len(buf):
        raise CorruptRecordError(f"batch length {header.batch_length} does not fit the {len(buf) - pos} bytes left")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative record count or offset delta")
    actual = crc32c.crc32c(memoryview(buf)[pos + CRC_START:pos + header.size])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def iter_batches(buf, validate: bool = True):
    """Yield (position, header) for each whole batch in ``buf``; stop at a partial tail."""
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD:
        header = validate_batch(buf, pos) if validate else read_header(buf, pos)
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Stamp the log offset into a batch (the field lies outside the CRC)."""
    struct.pack_into(">q", buf, pos, base_offset)


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp`` as its max timestamp, and re-seal the CRC."""
    header = read_header(buf, pos)
    struct.pack_into(">h", buf, pos + 21, header.attributes | ATTR_LOG_APPEND_TIME)
    struct.pack_into(">q", buf, pos + 35, timestamp)
    struct.pack_into(">I", buf, pos + 17, crc32c.crc32c(memoryview(buf)[pos + CRC_START:pos + header.size]))


# --- opening batches: records, varints, compression -------------------------------------

@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _read_varint(buf, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def _write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecordError("record field runs past the batch")
    return bytes(buf[pos:pos + length]), pos + length


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: bytes) -> bytes:
    # Java clients frame snappy the xerial way (magic, versions, then length-prefixed blocks).
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = bytearray(), 16
    while pos < len(data):
        (length,) = struct.unpack_from(">i", data, pos)
        out += bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + length]))
        pos += 4 + length
    return bytes(out)


def decompress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == Compression.SNAPPY:
        return _snappy_decompress(bytes(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise CorruptRecordError(f"unknown compression codec {codec}")


def compress(codec: Compression, data: bytes) -> bytes:
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown compression codec {codec}")


def decode_records(buf, pos: int = 0) -> tuple[BatchHeader, list[Record]]:
    """Open the batch at ``pos``: its header and its records with absolute offsets."""
    header = read_header(buf, pos)
    body = decompress(header.compression, memoryview(buf)[pos + HEADER_SIZE:pos + header.size])
    records, p = [], 0
    for _ in range(header.records_count):
        length, p = _read_varint(body, p)
        end = p + length
        p += 1  # record attributes, unused
        ts_delta, p = _read_varint(body, p)
        off_delta, p = _read_varint(body, p)
        key, p = _read_bytes(body, p)
        value, p = _read_bytes(body, p)
        n_headers, p = _read_varint(body, p)
        headers = []
        for _ in range(n_headers):
            hkey, p = _read_bytes(body, p)
            hval, p = _read_bytes(body, p)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
        if p != end:
            raise CorruptRecordError("record length does not match its fields")
        records.append(Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value, headers))
    return header, records


def encode_batch(records: list[Record], *, base_offset: int = 0, compression: Compression = Compression.NONE,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
                 attributes: int = 0) -> bytes:
    """Build one batch. Record offsets are kept relative to ``base_offset`` (gaps allowed, as compaction leaves)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_ts = min(r.timestamp for r in records)
    max_ts = max(r.timestamp for r in records)
    body = bytearray()
    for r in records:
        rec = bytearray(b"\x00")
        _write_varint(rec, r.timestamp - base_ts)
        _write_varint(rec, r.offset - base_offset)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        _write_varint(rec, len(r.headers))
        for hkey, hval in r.headers:
            _write_bytes(rec, hkey.encode())
            _write_bytes(rec, hval)
        _write_varint(body, len(rec))
        body += rec
    payload = compress(compression, bytes(body))
    attrs = (attributes & ~ATTR_COMPRESSION_MASK) | int(compression)
    last_delta = records[-1].offset - base_offset
    out = bytearray(HEADER.pack(base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload), -1, MAGIC, 0, attrs,
                                last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
                                len(records)))
    out += payload
    struct.pack_into(">I", out, 17, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
