"""The record batch v2 header: the one place that knows its byte positions. Fields by name and
their setters, the CRC-32C, framing (walking the batches of a buffer), the records section."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from .codecs import Compression, decompress
from .errors import CorruptRecordError, InvalidRecordError

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
_BATCH_LENGTH = struct.Struct(">i")
_CODECS = tuple(Compression)   # by attribute bits, without the enum's lookup
MESSAGE_MAX_BYTES = 1048588  # Kafka's default message.max.bytes (broker) and max.message.bytes (topic)


# Hashed by value as a frozen dataclass would be, but not frozen: a frozen one's __init__ sets each
# field through object.__setattr__, ~2 us a header, and a produce request reads two. Never assigned to.
@dataclass(slots=True, unsafe_hash=True)
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
        return _CODECS[codec]

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


def is_one_batch(buf) -> bool:
    """Whether ``buf`` is framed as exactly one batch (its header's batchLength covers it all)."""
    return len(buf) >= HEADER_SIZE and LOG_OVERHEAD + _BATCH_LENGTH.unpack_from(buf, BATCH_LENGTH_AT)[0] == len(buf)


def is_compressed(buf) -> bool:
    """Whether any batch in ``buf`` has a codec; reads two fields of each header (asked of every
    produce request) and stops at bad framing."""
    pos, end = 0, len(buf) - HEADER_SIZE
    while pos <= end:
        if buf[pos + ATTRIBUTES_AT + 1] & ATTR_COMPRESSION_MASK:   # the low byte of the int16 attributes
            return True
        (batch_length,) = _BATCH_LENGTH.unpack_from(buf, pos + BATCH_LENGTH_AT)
        if batch_length < MIN_BATCH_LENGTH:
            return False
        pos += LOG_OVERHEAD + batch_length
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


def sealed(header: BatchHeader, section) -> bytes:
    """The batch of ``header``'s fields followed by ``section``, its records as stored
    (compressed if its codec says so): the batch length, magic and CRC made to fit."""
    out = bytearray(HEADER.pack(header.base_offset, MIN_BATCH_LENGTH + len(section), header.partition_leader_epoch,
                                MAGIC, 0, header.attributes, header.last_offset_delta, header.base_timestamp,
                                header.max_timestamp, header.producer_id, header.producer_epoch,
                                header.base_sequence, header.records_count))
    out += section
    reseal_crc(out)
    return bytes(out)


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark a batch LogAppendTime with ``timestamp`` as its max timestamp, and re-seal the CRC."""
    header = read_header(buf, pos)
    struct.pack_into(">h", buf, pos + ATTRIBUTES_AT, header.attributes | ATTR_LOG_APPEND_TIME)
    set_max_timestamp(buf, pos, timestamp)
    reseal_crc(buf, pos)


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
