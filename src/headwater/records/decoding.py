"""Records out of batches: ``decode_records`` opens a batch into Record objects; aiokafka's
compiled reader reads the records of a stored batch without them."""
from __future__ import annotations

# aiokafka's compiled (Cython) record reader, imported from its extension module directly:
# where the wheel has no compiled extension this import fails, rather than every produce
# quietly paying the pure-Python reader aiokafka would fall back to.
from aiokafka.record._crecords import DefaultRecordBatch

from .encoding import Record
from .errors import InvalidRecordError
from .layout import HEADER, MAGIC, MIN_BATCH_LENGTH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader, read_header, \
    records_section, uncompressed_bound
from .varint import VARINT_MAX_BYTES, read_bytes, read_varint


def decode_records(buf, pos: int = 0, limit: int | None = None) -> tuple[BatchHeader, list[Record]]:
    """Open the batch at ``pos``: its header and its records with absolute offsets.
    Raises InvalidRecordError when the records do not parse, or decompress to more than
    ``limit`` bytes (default: ``uncompressed_bound``)."""
    header = read_header(buf, pos)
    body = records_section(buf, pos, header, uncompressed_bound(header) if limit is None else limit)
    records, p = [], 0
    try:
        for _ in range(header.records_count):
            length, p = read_varint(body, p, VARINT_MAX_BYTES)
            end = p + length
            ts_delta, p = read_varint(body, p + 1)  # +1: the record attributes, unused
            off_delta, p = read_varint(body, p, VARINT_MAX_BYTES)
            key, p = read_bytes(body, p)
            value, p = read_bytes(body, p)
            n_headers, p = read_varint(body, p, VARINT_MAX_BYTES)
            headers = []
            for _ in range(n_headers):
                hkey, p = read_bytes(body, p)
                hval, p = read_bytes(body, p)
                headers.append(((hkey or b"").decode("utf-8", "replace"), hval))
            if p != end:
                raise InvalidRecordError("record length does not match its fields")
            records.append(Record(header.base_offset + off_delta, header.base_timestamp + ts_delta, key, value,
                                  headers))
    except IndexError:
        raise InvalidRecordError(f"record {len(records)} runs past the end of the batch") from None
    return header, records


# aiokafka reads some varints before its bounds check: a zero byte past the end stops such a read
# in our own buffer, and the next check refuses it.
_READER_PAD = bytes(16)


def reader_buffer(body, count: int, last_offset_delta: int, base_timestamp: int) -> memoryview:
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
        length, p = read_varint(body, p, VARINT_MAX_BYTES)
        p += length
        starts.append(p)
    return starts


def compiled_records(body, header: BatchHeader) -> DefaultRecordBatch:
    """The records of a stored batch through aiokafka's compiled reader, from its uncompressed
    ``body`` (``records_section``): each with ``offset`` (the delta from the base offset),
    ``timestamp`` (CreateTime), ``key``, ``value``. Iterating raises CorruptRecordException,
    IndexError or UnicodeDecodeError on what it cannot parse; ``decode_records`` says why."""
    return DefaultRecordBatch(reader_buffer(body, header.records_count, header.last_offset_delta,
                                            header.base_timestamp))
