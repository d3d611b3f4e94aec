"""Kafka's zigzag varints and the varint-length-prefixed byte fields of a record."""
from __future__ import annotations

from .errors import InvalidRecordError

VARINT_MAX_BYTES, VARLONG_MAX_BYTES = 5, 10  # Kafka's int32 and int64 zigzag varints


def read_varint(buf, pos: int, max_bytes: int = VARLONG_MAX_BYTES) -> tuple[int, int]:
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


def write_varint(out: bytearray, value: int) -> None:
    value = (value << 1) ^ (value >> 63)
    while value & ~0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def read_bytes(buf, pos: int) -> tuple[bytes | None, int]:
    length, pos = read_varint(buf, pos, VARINT_MAX_BYTES)
    if length < -1 or pos + length > len(buf):
        raise InvalidRecordError(f"record field of length {length} does not fit the batch")
    if length == -1:
        return None, pos
    return bytes(buf[pos:pos + length]), pos + length


def write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data
