"""Kafka record batches (magic v2): the unit the log stores and the wire carries.

The one owner of the batch layout: header fields by name and their setters, the CRC,
codecs, records. The broker stores each batch as its producer sent it (stamping the base
offset, and rewriting a max timestamp its records contradict) once ``validate_produce``, the
log validator, has walked its records; opening records into objects (``decode_records``) is
for the few places that need keys and values: the log cleaner, internal topics, tools and tests.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

import cramjam
import crc32c
from aiokafka.errors import CorruptRecordException
# aiokafka's compiled (Cython) record reader, imported from its extension module directly:
# where the wheel has no compiled extension this import fails, rather than every produce
# quietly paying the pure-Python reader aiokafka would fall back to.
from aiokafka.record._crecords import DefaultRecordBatch

HEADER = struct.Struct(">qiiBIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part of the header outside batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # the batchLength of a batch with no record bytes
# Byte positions of header fields, from the start of the batch: those the broker rewrites,
# and those the Spark source's compiled reader (spark/record_columns.py) reads without HEADER.
BATCH_LENGTH_AT = 8
PARTITION_LEADER_EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
BASE_TIMESTAMP_AT = 27
MAX_TIMESTAMP_AT = 35
RECORDS_COUNT_AT = 57
CRC_START = ATTRIBUTES_AT  # the CRC covers attributes .. end of batch
MAGIC = 2
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

ATTR_COMPRESSION_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
MESSAGE_MAX_BYTES = 1048588  # Kafka's default message.max.bytes (broker) and max.message.bytes (topic)


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class CorruptRecordError(ValueError):
    """A batch whose framing, magic or CRC is wrong."""


class InvalidRecordError(CorruptRecordError):
    """A batch that arrived as its producer sealed it (the CRC holds) but breaks the format:
    its records, codec or counts. Sending it again cannot help, unlike a CRC mismatch.
    ``record_errors`` names the offending records, (index in the batch, why), when only some
    are (KIP-467), so clients fail those and not their neighbours."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.record_errors = record_errors or []


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
        codec = self.attributes & ATTR_COMPRESSION_MASK
        if codec > Compression.ZSTD:
            raise InvalidRecordError(f"unknown compression codec {codec}")
        return Compression(codec)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

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
    if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > len(buf):
        raise CorruptRecordError(f"batch length {header.batch_length} does not fit the {len(buf) - pos} bytes left")
    if header.last_offset_delta < 0 or header.records_count < 0:
        raise CorruptRecordError("negative record count or offset delta")
    actual = crc32c.crc32c(memoryview(buf)[pos + CRC_START:pos + header.size])
    if actual != header.crc:
        raise CorruptRecordError(f"CRC-32C mismatch: stored {header.crc:#010x}, computed {actual:#010x}")
    return header


def is_compressed(buf) -> bool:
    """Whether any batch in ``buf`` has a codec; reads headers only and stops at bad framing."""
    pos = 0
    while pos + HEADER_SIZE <= len(buf):
        header = read_header(buf, pos)
        if header.attributes & ATTR_COMPRESSION_MASK:
            return True
        if header.batch_length < MIN_BATCH_LENGTH:
            return False
        pos += header.size
    return False


def iter_batches(buf, validate: bool = True):
    """Yield (position, header) for each whole batch in ``buf``; stop at a partial tail."""
    pos, end = 0, len(buf)
    while end - pos >= LOG_OVERHEAD:
        header = validate_batch(buf, pos) if validate else read_header(buf, pos)
        if header.batch_length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {header.batch_length} at byte {pos} is below the header's")
        if pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Stamp the log offset into a batch (the field lies outside the CRC)."""
    struct.pack_into(">q", buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Outside the CRC, like the base offset."""
    struct.pack_into(">i", buf, pos + PARTITION_LEADER_EPOCH_AT, epoch)


def set_last_offset_delta(buf: bytearray, pos: int, delta: int) -> None:
    """Call reseal_crc after."""
    struct.pack_into(">i", buf, pos + LAST_OFFSET_DELTA_AT, delta)


def set_max_timestamp(buf: bytearray, pos: int, timestamp: int) -> None:
    """Call reseal_crc after."""
    struct.pack_into(">q", buf, pos + MAX_TIMESTAMP_AT, timestamp)


def reseal_crc(buf: bytearray, pos: int = 0) -> None:
    """Recompute the CRC-32C of the batch at ``pos`` after a change to its attributes .. end."""
    end = pos + read_header(buf, pos).size
    struct.pack_into(">I", buf, pos + CRC_AT, crc32c.crc32c(memoryview(buf)[pos + CRC_START:end]))


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp`` as its max timestamp, and re-seal the CRC."""
    header = read_header(buf, pos)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_AT, header.attributes | ATTR_LOG_APPEND_TIME)
    set_max_timestamp(buf, pos, timestamp)
    reseal_crc(buf, pos)


# --- opening batches: records, varints, compression -------------------------------------

@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


VARINT_MAX_BYTES, VARLONG_MAX_BYTES = 5, 10  # Kafka's int32 and int64 zigzag varints


def _read_varint(buf, pos: int, max_bytes: int = VARLONG_MAX_BYTES) -> tuple[int, int]:
    """The zigzag varint at ``pos`` and the position after it. Past the end of ``buf`` it
    raises IndexError, which the record walkers turn into InvalidRecordError."""
    b = buf[pos]
    if b < 0x80:  # most varints in a batch are one byte: the short way saves a sixth of a walk
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = result = 0
    limit = 7 * max_bytes
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift >= limit:
            raise InvalidRecordError(f"varint longer than {max_bytes} bytes")


def _write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = _read_varint(buf, pos, VARINT_MAX_BYTES)
    if length < -1 or pos + length > len(buf):
        raise InvalidRecordError(f"record field of length {length} does not fit the batch")
    if length == -1:
        return None, pos
    return bytes(buf[pos:pos + length]), pos + length


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


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


def records_section(buf, pos: int, header: BatchHeader, limit: int | None = None):
    """The records of the batch at ``pos``, uncompressed (refused past ``limit`` bytes)."""
    return decompress(header.compression, memoryview(buf)[pos + HEADER_SIZE:pos + header.size], limit)


# A batch may decompress to this many times message.max.bytes (the log validator's bound) or
# its own size, if larger: what needs more is a decompression bomb.
DECOMPRESSION_RATIO = 32


def uncompressed_bound(header: BatchHeader, max_message_bytes: int = MESSAGE_MAX_BYTES) -> int:
    """The most the records of a stored batch may decompress to: a decompression bomb on disk
    is refused (InvalidRecordError) before it fills memory."""
    return DECOMPRESSION_RATIO * max(max_message_bytes, header.size)


def decode_records(buf, pos: int = 0, limit: int | None = None) -> tuple[BatchHeader, list[Record]]:
    """Open the batch at ``pos``: its header and its records with absolute offsets.
    Raises InvalidRecordError when the records do not parse, or decompress to more than
    ``limit`` bytes (default: ``uncompressed_bound``)."""
    header = read_header(buf, pos)
    body = records_section(buf, pos, header, uncompressed_bound(header) if limit is None else limit)
    records, p = [], 0
    try:
        for _ in range(header.records_count):
            length, p = _read_varint(body, p, VARINT_MAX_BYTES)
            end = p + length
            ts_delta, p = _read_varint(body, p + 1)  # +1: the record attributes, unused
            off_delta, p = _read_varint(body, p, VARINT_MAX_BYTES)
            key, p = _read_bytes(body, p)
            value, p = _read_bytes(body, p)
            n_headers, p = _read_varint(body, p, VARINT_MAX_BYTES)
            headers = []
            for _ in range(n_headers):
                hkey, p = _read_bytes(body, p)
                hval, p = _read_bytes(body, p)
                headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
            if p != end:
                raise InvalidRecordError("record length does not match its fields")
            records.append(Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value,
                                  headers))
    except IndexError:
        raise InvalidRecordError(f"record {len(records)} runs past the end of the batch") from None
    return header, records


# --- the log validator: what a client may append -----------------------------------------

def validate_produce(buf: bytearray, *, max_uncompressed_bytes: int,
                     keys_required: bool = False) -> list[tuple[int, BatchHeader]]:
    """Kafka's log validator for the batches a client sends to one partition; returns
    (position, header) of each. Framing, magic or CRC wrong: CorruptRecordError. Intact but
    invalid (InvalidRecordError): a control batch, an unknown codec, a body that does not
    decompress within ``max_uncompressed_bytes``, a record count that is not lastOffsetDelta
    + 1, a record whose lengths, varints or offset delta do not hold, bytes after the last
    record, a record timestamp past 64 bits, a record without a key when ``keys_required``.

    A CreateTime batch's max timestamp is the broker's to compute, as Kafka's: one that is not
    its records' latest (librdkafka writes 0 when they carry -1) is rewritten in ``buf`` and the
    CRC re-sealed, never a reason to drop the client's data. No I/O: safe on any thread."""
    batches = list(iter_batches(buf))
    if not batches or sum(header.size for _, header in batches) != len(buf):
        raise CorruptRecordError("records end in a partial batch")
    for i, (pos, header) in enumerate(batches):
        if header.is_control:
            raise InvalidRecordError("clients may not write control batches")
        if header.records_count < 1 or header.last_offset_delta != header.records_count - 1:
            raise InvalidRecordError(f"records count {header.records_count} does not match last offset delta "
                                     f"{header.last_offset_delta}")
        body = records_section(buf, pos, header, max_uncompressed_bytes)
        latest = header.base_timestamp + _checked_records(buf, pos, body, header.records_count, keys_required)
        if header.attributes & ATTR_LOG_APPEND_TIME or latest == header.max_timestamp:
            continue
        if not _INT64_MIN <= latest <= _INT64_MAX:
            raise InvalidRecordError(f"the latest record timestamp {latest} does not fit 64 bits")
        set_max_timestamp(buf, pos, latest)
        reseal_crc(buf, pos)
        batches[i] = pos, read_header(buf, pos)
    return batches


_INT64_MIN, _INT64_MAX = -1 << 63, (1 << 63) - 1


def _checked_records(buf, pos: int, body, count: int, keys_required: bool) -> int:
    """``_check_records``, naming every keyless record when missing keys are the only fault."""
    try:
        return _check_records(body, count, keys_required)
    except InvalidRecordError as exc:
        if not keys_required:
            raise
        _check_records(body, count, False)  # any other fault is the error to report
        keyless = [(index, KEYLESS_ON_COMPACTED) for index, record in enumerate(decode_records(buf, pos)[1])
                   if record.key is None]
        raise InvalidRecordError(str(exc), keyless) from None


KEYLESS_ON_COMPACTED = "a compacted topic (cleanup.policy=compact) refuses records without a key"


def _check_records(body, count: int, keys_required: bool) -> int:
    """Check ``count`` records; return the largest timestamp delta. The compiled reader vouches
    for the records a client normally sends; whatever it cannot vouch for, valid or not, the
    walk decides, and words the error."""
    max_delta = _read_compiled(body, count, keys_required)
    return _walk_records(body, count, keys_required) if max_delta is None else max_delta


class _Unsure(Exception):
    """The compiled reader's parse cannot vouch for a batch: the walk must decide."""


_BELOW_ANY_DELTA = -1 << 64  # timestamp deltas are int64
# aiokafka reads some varints before its bounds check: a zero byte past the end stops such a read
# in our own buffer, and the next check refuses it.
_READER_PAD = bytes(16)


def _read_compiled(body, count: int, keys_required: bool) -> int | None:
    """The largest timestamp delta if aiokafka's compiled reader parses all ``count`` records,
    with offset deltas 0..count-1, keys when required, and every record written the one
    shortest way; otherwise None.

    Why the shortest way: the reader checks record and field lengths against the bytes, the
    header count and that no bytes follow the last record, but it takes up to 10 bytes for any
    varint (Kafka: 5 for an int32), any negative length for null (we refuse below -1), and the
    record attributes byte as a varint (Kafka: one byte). Each of those takes more bytes than the
    shortest writing of what the reader made of it, and nothing takes fewer, so when the shortest
    sizes of the records add up to the body's length, Kafka's parse and the walk's are the
    reader's. Left to check is a null's length byte (-2 .. -64 are one byte, like -1). Null
    header values are rare: the walk takes those batches."""
    size, max_delta, sizes = 0, _BELOW_ANY_DELTA, _VARINT_SIZES
    try:
        for index, record in enumerate(DefaultRecordBatch(_reader_buffer(body, count, count - 1, 0))):
            delta, key, value, headers = record.timestamp, record.key, record.value, record.headers
            if record.offset != index or (key is None and keys_required):
                return None
            # where the key and the value lengths start: past attributes, timestamp and offset deltas
            key_at = 1 + (sizes[delta] if 0 <= delta < _TABLED else _shortest_varint(delta)) + sizes[index]
            value_at = key_at + (1 if key is None else sizes[len(key)] + len(key))
            length = (value_at + (1 if value is None else sizes[len(value)] + len(value))
                      + (_headers_size(headers) if headers else 1))
            start = size + sizes[length]
            if key is None and body[start + key_at] != 1 or value is None and body[start + value_at] != 1:
                return None  # a null written other than as -1
            size = start + length
            if delta > max_delta:
                max_delta = delta
    except (IndexError, CorruptRecordException, UnicodeDecodeError, OverflowError, MemoryError, _Unsure):
        # IndexError: a value past the size table. OverflowError, MemoryError: a length near 2**63,
        # on which aiokafka's bounds check overflows.
        return None
    return max_delta if size == len(body) else None


def _reader_buffer(body, count: int, last_offset_delta: int, base_timestamp: int) -> memoryview:
    """``body`` (uncompressed records) behind a header for aiokafka's compiled reader: base offset 0,
    so its records' offsets are offset deltas, and CreateTime from ``base_timestamp``."""
    batch = bytearray(HEADER.pack(0, MIN_BATCH_LENGTH + len(body), -1, MAGIC, 0, 0, last_offset_delta, base_timestamp,
                                  0, NO_PRODUCER_ID, -1, NO_SEQUENCE, count))
    batch += body
    end = len(batch)
    batch += _READER_PAD
    return memoryview(batch)[:end]


def record_boundaries(body, count: int) -> list[int]:
    """Where each of the ``count`` records in an uncompressed records section starts, and
    where the last ends: record i is ``body[b[i]:b[i + 1]]``."""
    starts, p = [0], 0
    for _ in range(count):
        length, p = _read_varint(body, p, VARINT_MAX_BYTES)
        p += length
        starts.append(p)
    return starts


def compiled_records(body, header: BatchHeader) -> DefaultRecordBatch:
    """The records of a stored batch through aiokafka's compiled reader, from its uncompressed
    ``body`` (``records_section``): each with ``offset`` (the delta from the base offset),
    ``timestamp`` (CreateTime), ``key``, ``value``. Iterating raises CorruptRecordException,
    IndexError or UnicodeDecodeError on what it cannot parse; ``decode_records`` says why."""
    return DefaultRecordBatch(_reader_buffer(body, header.records_count, header.last_offset_delta,
                                             header.base_timestamp))


def _headers_size(headers: list[tuple[str, bytes | None]]) -> int:
    sizes = _VARINT_SIZES
    size = sizes[len(headers)]
    for key, value in headers:
        if value is None:
            raise _Unsure
        key_length = len(key.encode())  # the reader decoded it strictly: the same bytes again
        size += sizes[key_length] + key_length + sizes[len(value)] + len(value)
    return size


def _shortest_varint(value: int) -> int:
    """Bytes of the shortest zigzag varint of ``value``, an int64."""
    zigzag = (value << 1) ^ (value >> 63)
    if zigzag >> 63:
        raise _Unsure  # 10 bytes: the reader drops bits past the 64th, which the walk keeps
    return max(1, (zigzag.bit_length() + 6) // 7)


# The bytes of the shortest varint of each value below 2**20 (zigzag doubles it: 6, 13, 20 bits).
# A longer field or a batch of more records is for the walk, whose cost per record a record
# that large hardly notices; timestamp deltas past it are worked out.
_TABLED = 1 << 20
_VARINT_SIZES = b"\x01" * (1 << 6) + b"\x02" * ((1 << 13) - (1 << 6)) + b"\x03" * (_TABLED - (1 << 13))


def _walk_records(body, count: int, keys_required: bool) -> int:
    """Walk ``count`` records without copying them out; return the largest timestamp delta.
    A field length that overshoots its record needs no check of its own: the walk then
    cannot end exactly at the record's end."""
    p, end, max_delta = 0, len(body), None
    try:
        for index in range(count):
            length, p = _read_varint(body, p, VARINT_MAX_BYTES)
            record_end = p + length
            if length < 1 or record_end > end:
                raise InvalidRecordError(f"record {index}: length {length} does not fit the batch")
            ts_delta, p = _read_varint(body, p + 1)  # +1: the record attributes, unused
            off_delta, p = _read_varint(body, p, VARINT_MAX_BYTES)
            if off_delta != index:
                raise InvalidRecordError(f"record {index} has offset delta {off_delta}")
            key_length, p = _read_varint(body, p, VARINT_MAX_BYTES)
            if key_length < 0 and keys_required:
                raise InvalidRecordError(f"record {index} is without a key, which a compacted topic "
                                         "(cleanup.policy=compact) refuses")
            p = _skip_field(p, key_length, index, "key")
            value_length, p = _read_varint(body, p, VARINT_MAX_BYTES)
            p = _skip_field(p, value_length, index, "value")
            n_headers, p = _read_varint(body, p, VARINT_MAX_BYTES)
            if n_headers < 0:
                raise InvalidRecordError(f"record {index} has {n_headers} headers")
            for _ in range(n_headers):
                hkey_length, p = _read_varint(body, p, VARINT_MAX_BYTES)
                if hkey_length < 0:
                    raise InvalidRecordError(f"record {index} has a header with a null key")
                p += hkey_length
                hvalue_length, p = _read_varint(body, p, VARINT_MAX_BYTES)
                p = _skip_field(p, hvalue_length, index, "header value")
            if p != record_end:
                raise InvalidRecordError(f"record {index}: length {length} does not match its fields")
            if max_delta is None or ts_delta > max_delta:
                max_delta = ts_delta
    except IndexError:
        raise InvalidRecordError("a record runs past the end of the batch") from None
    if p != end:
        raise InvalidRecordError(f"{end - p} bytes after the last record")
    return max_delta


def _skip_field(p: int, length: int, index: int, name: str) -> int:
    if length < -1:
        raise InvalidRecordError(f"record {index} has a {name} of length {length}")
    return p + length if length > 0 else p


def recompressed(buf, pos: int, header: BatchHeader, codec: Compression) -> bytes:
    """The batch at ``pos`` with its records section compressed with ``codec`` instead: the
    broker's side of a topic's ``compression.type``. Every other header field is kept
    (producer id, epoch, sequence, timestamps), so idempotence and offsets are unchanged."""
    payload = compress(codec, bytes(records_section(buf, pos, header)))
    attrs = (header.attributes & ~ATTR_COMPRESSION_MASK) | int(codec)
    return _sealed(header, attrs, payload, header.records_count, header.max_timestamp)


def with_records(header: BatchHeader, body: bytes, count: int, max_timestamp: int) -> bytes:
    """The batch of ``header`` holding only ``count`` of its records, whose uncompressed bytes
    are ``body``: compressed with its codec, every other header field kept (the offset range,
    base timestamp, producer fields), so the records' offset and timestamp deltas still hold.
    The log cleaner's rewrite of a batch that lost records."""
    return _sealed(header, header.attributes, compress(header.compression, body), count, max_timestamp)


def _sealed(header: BatchHeader, attributes: int, payload: bytes, count: int, max_timestamp: int) -> bytes:
    out = bytearray(HEADER.pack(header.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(payload),
                                header.partition_leader_epoch, MAGIC, 0, attributes, header.last_offset_delta,
                                header.base_timestamp, max_timestamp, header.producer_id,
                                header.producer_epoch, header.base_sequence, count))
    out += payload
    reseal_crc(out)
    return bytes(out)


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
    reseal_crc(out)
    return bytes(out)


# --- control batches: the transaction markers ----------------------------------------------

CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")      # version 0, type
_CONTROL_VALUE = struct.Struct(">hi")    # version 0, coordinator epoch


def encode_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                  timestamp: int) -> bytes:
    """The control batch that ends a transaction in one partition: transactional and control
    attributes, one record whose key says commit or abort."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch([Record(0, timestamp, key, value)], producer_id=producer_id, producer_epoch=producer_epoch,
                        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL)


def marker_is_commit(record: Record) -> bool:
    """Whether a control record (a decoded marker batch's one record) commits its transaction."""
    return _CONTROL_KEY.unpack(record.key)[1] == CONTROL_COMMIT
