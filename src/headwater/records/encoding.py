"""Records into batches: ``encode_batch``, and the rewrites of a stored batch (another codec,
fewer records) that keep its header fields."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

# aiokafka's compiled (Cython) batch builder, from its extension module directly (as decoding's reader):
# the same bytes as the walk below, several times faster.
from aiokafka.record._crecords import DefaultRecordBatchBuilder

from .codecs import Compression, compress
from .layout import ATTR_COMPRESSION_MASK, MAGIC, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, records_section, sealed
from .varint import write_varint


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def _zigzag_varint(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


_TABLED_FROM, _TABLED_TO = -1, 1 << 13   # null's -1, deltas and lengths below 8 KiB: at most 3 bytes
_VARINTS = [_zigzag_varint(v) for v in range(_TABLED_FROM, _TABLED_TO)]


def _varint(value: int) -> bytes:
    return _VARINTS[value + 1] if _TABLED_FROM <= value < _TABLED_TO else _zigzag_varint(value)


def _field(data: bytes | None) -> bytes:
    """A record's nullable bytes field: its varint length (-1 for null), then the bytes."""
    return b"\x01" if data is None else _varint(len(data)) + data


def recompressed(buf, pos: int, header: BatchHeader, codec: Compression) -> bytes:
    """The batch at ``pos`` with its records section compressed with ``codec`` instead: the
    broker's side of a topic's ``compression.type``. Every other header field is kept
    (producer id, epoch, sequence, timestamps), so idempotence and offsets are unchanged."""
    payload = compress(codec, bytes(records_section(buf, pos, header)))
    return sealed(replace(header, attributes=(header.attributes & ~ATTR_COMPRESSION_MASK) | int(codec)), payload)


def with_records(header: BatchHeader, body: bytes, count: int, max_timestamp: int) -> bytes:
    """The batch of ``header`` holding only ``count`` of its records, whose uncompressed bytes
    are ``body``: compressed with its codec, every other header field kept (the offset range,
    base timestamp, producer fields), so the records' offset and timestamp deltas still hold.
    The log cleaner's rewrite of a batch that lost records."""
    return sealed(replace(header, records_count=count, max_timestamp=max_timestamp), compress(header.compression, body))


def encode_batch(records: list[Record], *, base_offset: int = 0, compression: Compression = Compression.NONE,
                 producer_id: int = NO_PRODUCER_ID, producer_epoch: int = -1, base_sequence: int = NO_SEQUENCE,
                 attributes: int = 0) -> bytes:
    """Build one batch. Record offsets are kept relative to ``base_offset`` (gaps allowed, as compaction leaves)."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_ts = min(r.timestamp for r in records)
    # What the broker writes itself (HTTP produce, UDP ingest, internal topics) fits aiokafka's
    # compiled builder: uncompressed, from offset 0, no transactional or control bit, the first
    # record's timestamp the least (the builder's base).
    if (compression == Compression.NONE and base_offset == 0 and not attributes & ~ATTR_COMPRESSION_MASK
            and records[0].timestamp == base_ts):
        try:
            return _compiled(records, producer_id, producer_epoch, base_sequence)
        except TypeError:  # a bytes-like field that is not bytes
            pass
    return _walked(records, base_offset, base_ts, compression, producer_id, producer_epoch, base_sequence, attributes)


def _compiled(records: list[Record], producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    builder = DefaultRecordBatchBuilder(MAGIC, 0, 0, producer_id, producer_epoch, base_sequence, _NO_SIZE_LIMIT)
    append = builder.append
    for r in records:
        if append(r.offset, r.timestamp, r.key, r.value, r.headers) is None:  # past _NO_SIZE_LIMIT
            raise ValueError("a record batch holds at most 2 GiB")
    return bytes(builder.build())


def _walked(records: list[Record], base_offset: int, base_ts: int, compression: Compression, producer_id: int,
            producer_epoch: int, base_sequence: int, attributes: int) -> bytes:
    parts = []
    for r in records:
        # Per record one join of small byte strings: the varints of small values come from a table.
        rec = b"".join([b"\x00", _varint(r.timestamp - base_ts), _varint(r.offset - base_offset),
                        _field(r.key), _field(r.value), _varint(len(r.headers)),
                        *[_field(hkey.encode()) + _field(hval) for hkey, hval in r.headers]])
        parts += _varint(len(rec)), rec
    body = b"".join(parts)
    header = BatchHeader(base_offset=base_offset, batch_length=0, partition_leader_epoch=-1, magic=MAGIC, crc=0,
                         attributes=(attributes & ~ATTR_COMPRESSION_MASK) | int(compression),
                         last_offset_delta=records[-1].offset - base_offset, base_timestamp=base_ts,
                         max_timestamp=max(r.timestamp for r in records), producer_id=producer_id,
                         producer_epoch=producer_epoch, base_sequence=base_sequence, records_count=len(records))
    return sealed(header, compress(compression, body))


_NO_SIZE_LIMIT = (1 << 31) - 1  # the builder's batch_size; the appender applies the topic's limits
