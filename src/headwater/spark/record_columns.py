"""Fetched record batches (magic 2) straight into the Spark source's Arrow columns.

The walk over records is compiled (numba): a fetch response's bytes become vectors of
offsets, timestamps and the positions of keys, values and headers, then keys and values
are gathered into Arrow's binary layout; there is no Python object per record. Python
sees only the batches the compiled walk hands back: compressed ones (decompressed here,
then walked), control batches (skipped) and, when aborted transactions must be left
out, transactional ones (decided here with the fetch's aborted-transaction list, as
Kafka's consumer decides).
"""

from __future__ import annotations

import numba
import numpy as np
import pyarrow as pa

from headwater.records import CorruptRecordError, decode_records, read_header
from headwater.records.control import marker_is_commit
from headwater.records.encoding import Record, encode_batch
from headwater.records.layout import (ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL,
                                      ATTRIBUTES_AT, BASE_TIMESTAMP_AT, BATCH_LENGTH_AT, HEADER_SIZE,
                                      LAST_OFFSET_DELTA_AT, LOG_OVERHEAD, MAGIC, MAGIC_AT, MAX_TIMESTAMP_AT,
                                      RECORDS_COUNT_AT, records_section, uncompressed_bound)

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
COLUMNS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]

# Per record, one row of int64: offset, timestamp (ms), Spark's timestamp type (0 create,
# 1 log append), where its key and value start in the data and their lengths (-1: null),
# and its header count. Per header: key start, key length, value start, value length.
OFFSET, TIMESTAMP, TYPE, KEY_AT, KEY_LEN, VALUE_AT, VALUE_LEN, HEADER_COUNT = range(8)
RECORD_FIELDS, HEADER_FIELDS = 8, 4
# What the compiled walk answers with, besides the new fill levels.
DONE, PYTHON, ROOM, MALFORMED = 0, 1, 2, -1
# The smallest record (length, attributes, timestamp and offset deltas, key and value
# lengths, header count: one byte each) and the smallest header (two lengths).
MIN_RECORD_BYTES, MIN_HEADER_BYTES = 7, 2
ARROW_MAX_BYTES = 2**31 - 1  # what int32 offsets address in one binary column


def arrow_schema(include_headers: bool) -> pa.Schema:
    return pa.schema(list(COLUMNS) + ([("headers", HEADERS_TYPE)] if include_headers else []))


@numba.njit(cache=True, nogil=True)
def _varint(buf, pos, stop):
    """A zigzag varint at pos; (value, next position), or (0, -1) if it runs past stop."""
    raw = np.int64(0)
    shift = 0
    while pos < stop and shift < 64:
        b = np.int64(buf[pos])
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    return np.int64(0), -1


@numba.njit(cache=True, nogil=True)
def _big_endian(buf, pos, size):
    value = np.int64(0)
    for i in range(size):
        value = (value << 8) | np.int64(buf[pos + i])
    if size < 8 and value >= np.int64(1) << (8 * size - 1):
        value -= np.int64(1) << (8 * size)
    return value


@numba.njit(cache=True, nogil=True)
def _walk_records(body, pos, stop, count, base_offset, base_timestamp, log_append_time, max_timestamp, shift,
                  records, n, headers, h, with_headers):
    """The `count` records of one batch in body[pos:stop] into records[n:] (and their
    headers into headers[h:]); positions are stored plus `shift`, where this body sits in
    the data keys and values are gathered from. Returns the new (n, h), n = -1 if malformed."""
    for _ in range(count):
        length, pos = _varint(body, pos, stop)
        if pos < 0 or length < MIN_RECORD_BYTES - 1 or pos + length > stop:
            return -1, h
        end = pos + length
        delta, pos = _varint(body, pos + 1, end)  # past the attributes byte
        if pos < 0:
            return -1, h
        offset_delta, pos = _varint(body, pos, end)
        if pos < 0:
            return -1, h
        row = records[n]
        row[OFFSET] = base_offset + offset_delta
        if log_append_time:  # the broker's time for the whole batch
            row[TIMESTAMP] = max_timestamp
            row[TYPE] = 1
        else:
            row[TIMESTAMP] = base_timestamp + delta
            row[TYPE] = 0
        for field in (KEY_AT, VALUE_AT):
            size, pos = _varint(body, pos, end)
            if pos < 0 or size < -1 or pos + max(size, 0) > end:
                return -1, h
            row[field] = pos + shift
            row[field + 1] = size
            pos += max(size, 0)
        count_headers, pos = _varint(body, pos, end)
        if pos < 0 or count_headers < 0 or count_headers > (end - pos) // MIN_HEADER_BYTES:
            return -1, h
        row[HEADER_COUNT] = count_headers
        for _ in range(count_headers):
            for field in (0, 2):
                size, pos = _varint(body, pos, end)
                if pos < 0 or size < (0 if field == 0 else -1) or pos + max(size, 0) > end:
                    return -1, h
                if with_headers:
                    headers[h, field] = pos + shift
                    headers[h, field + 1] = size
                pos += max(size, 0)
            if with_headers:
                h += 1
        if pos != end:
            return -1, h
        n += 1
    return n, h


@numba.njit(cache=True, nogil=True)
def _walk_batches(buf, pos, python_bits, records, n, headers, h, with_headers):
    """Walk the complete batches from pos on, until one whose attributes have any of
    `python_bits` (it is Python's), one that needs more room, or the end. Returns
    (status, position of the batch it stopped at, n, h, the offset after the last batch walked)."""
    after = np.int64(-1)
    size = len(buf)
    while pos + HEADER_SIZE <= size:
        stop = pos + LOG_OVERHEAD + _big_endian(buf, pos + BATCH_LENGTH_AT, 4)
        if stop > size:
            break  # a fetch may end in part of a batch
        if stop < pos + HEADER_SIZE or buf[pos + MAGIC_AT] != MAGIC:
            return MALFORMED, pos, n, h, after
        attributes = _big_endian(buf, pos + ATTRIBUTES_AT, 2)
        if attributes & python_bits:
            return PYTHON, pos, n, h, after
        count = _big_endian(buf, pos + RECORDS_COUNT_AT, 4)
        if count < 0 or count > (stop - pos - HEADER_SIZE) // MIN_RECORD_BYTES:
            return MALFORMED, pos, n, h, after
        if n + count > len(records) or (with_headers and h + (stop - pos) // MIN_HEADER_BYTES > len(headers)):
            return ROOM, pos, n, h, after
        base_offset = _big_endian(buf, pos, 8)
        n, h = _walk_records(buf, pos + HEADER_SIZE, stop, count, base_offset,
                             _big_endian(buf, pos + BASE_TIMESTAMP_AT, 8), (attributes & ATTR_LOG_APPEND_TIME) != 0,
                             _big_endian(buf, pos + MAX_TIMESTAMP_AT, 8), 0, records, n, headers, h, with_headers)
        if n < 0:
            return MALFORMED, pos, n, h, after
        after = base_offset + _big_endian(buf, pos + LAST_OFFSET_DELTA_AT, 4) + 1
        pos = stop
    return DONE, pos, n, h, after


@numba.njit(cache=True, nogil=True)
def _gather(data, at, size):
    """Arrow's binary layout of the byte strings data[at[i]:at[i]+size[i]] (size -1: null):
    (int32 offsets, bytes, validity)."""
    n = len(at)
    offsets = np.empty(n + 1, np.int32)
    valid = np.empty(n, np.bool_)
    total = 0
    for i in range(n):
        offsets[i] = total
        valid[i] = size[i] >= 0
        total += max(size[i], 0)
    if total > ARROW_MAX_BYTES:
        raise ValueError("one fetch holds more than 2 GiB of keys or values: lower max.partition.fetch.bytes")
    offsets[n] = total
    out = np.empty(total, np.uint8)
    for i in range(n):
        if size[i] > 0:
            out[offsets[i]:offsets[i + 1]] = data[at[i]:at[i] + size[i]]
    return offsets, out, valid


def _binary(data: np.ndarray, at: np.ndarray, size: np.ndarray, kind: pa.DataType) -> pa.Array:
    offsets, out, valid = _gather(data, at, size)
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(kind, len(at), [validity, pa.py_buffer(offsets), pa.py_buffer(out)])


def load_compiled_walk() -> None:
    """Walk a one-record batch, so that numba loads (or compiles) the walk's machine code
    now rather than on a reader's first fetch."""
    FetchedRecords(encode_batch([Record(0, 0, b"k", b"v", [("h", b"")])]), True).columns("", 0, 0, 1)


class FetchedRecords:
    """The records of one fetch response for one partition, walked once; `columns` cuts
    an offset range out of them as an Arrow record batch."""

    def __init__(self, raw: bytes, with_headers: bool, aborted: list[tuple[int, int]] | None = None):
        self.with_headers = with_headers
        self.records = np.empty((max(64, len(raw) // 64), RECORD_FIELDS), np.int64)
        self.headers = np.empty((1024 if with_headers else 0, HEADER_FIELDS), np.int64)
        self.n = self.h = 0
        self.next_offset = -1  # the offset after the last complete batch, -1 if there was none
        buf = np.frombuffer(raw, np.uint8)
        self._bodies: list[np.ndarray] = [buf]  # what keys and values are gathered from, end to end
        self._shift = len(buf)
        # Kafka's consumer rule for read_committed: a producer's batches are left out from the
        # first offset of an aborted transaction until that producer's abort marker.
        self._aborted = sorted((first, producer) for producer, first in aborted or [])
        self._next_aborted = 0  # the first of them not yet reached
        self._aborting: set[int] = set()
        python_bits = ATTR_COMPRESSION_MASK | ATTR_CONTROL | (ATTR_TRANSACTIONAL if self._aborted else 0)
        pos = 0
        while True:
            status, pos, self.n, self.h, after = _walk_batches(buf, pos, python_bits, self.records, self.n,
                                                               self.headers, self.h, with_headers)
            self.next_offset = max(self.next_offset, after)
            if status == DONE:
                if self.next_offset < 0 and raw:  # a broker sends at least one whole batch (KIP-74)
                    raise CorruptRecordError(f"the fetch response holds {len(raw)} bytes but no whole record batch")
                return
            if status == MALFORMED:
                raise CorruptRecordError(f"malformed record batch at byte {pos} of the fetch response")
            header = read_header(raw, pos)
            if status == ROOM:
                self._make_room(header.records_count, header.size)
                continue
            self._batch(raw, pos, header)
            self.next_offset = header.last_offset + 1
            pos += header.size

    def _make_room(self, records: int, batch_bytes: int) -> None:
        """Room for `records` more records and for the headers `batch_bytes` can hold."""
        if self.n + records > len(self.records):
            self.records = np.resize(self.records, (max(self.n + records, 2 * len(self.records)), RECORD_FIELDS))
        need = self.h + batch_bytes // MIN_HEADER_BYTES
        if self.with_headers and need > len(self.headers):
            self.headers = np.resize(self.headers, (max(need, 2 * len(self.headers)), HEADER_FIELDS))

    def _batch(self, raw: bytes, pos: int, header) -> None:
        """A batch the compiled walk left to Python: a control batch, a transactional one
        under read_committed, or a compressed one."""
        while self._next_aborted < len(self._aborted) and self._aborted[self._next_aborted][0] <= header.last_offset:
            self._aborting.add(self._aborted[self._next_aborted][1])
            self._next_aborted += 1
        if header.is_control:
            if header.producer_id in self._aborting:
                markers = decode_records(raw, pos)[1]  # none left, after compaction: not an abort marker
                if markers and not marker_is_commit(markers[0]):
                    self._aborting.discard(header.producer_id)
            return
        if header.is_transactional and header.producer_id in self._aborting:
            return
        if header.compression:
            body = np.frombuffer(records_section(raw, pos, header, uncompressed_bound(header)), np.uint8)
            start, stop, shift = 0, len(body), self._shift
            self._bodies.append(body)
            self._shift += len(body)
        else:
            body, start, stop, shift = self._bodies[0], pos + HEADER_SIZE, pos + header.size, 0
        if header.records_count > (stop - start) // MIN_RECORD_BYTES:
            raise CorruptRecordError(f"the batch at offset {header.base_offset} claims more records than it holds")
        self._make_room(header.records_count, stop - start)
        n, self.h = _walk_records(body, start, stop, header.records_count, header.base_offset, header.base_timestamp,
                                  bool(header.attributes & ATTR_LOG_APPEND_TIME), header.max_timestamp, shift,
                                  self.records, self.n, self.headers, self.h, self.with_headers)
        if n < 0:
            raise CorruptRecordError(f"malformed records in the batch at offset {header.base_offset}")
        self.n = n

    def columns(self, topic: str, partition: int, start: int, end: int) -> pa.RecordBatch | None:
        """The records with offsets in [start, end), or None if there are none."""
        records = self.records[:self.n]
        first, last = np.searchsorted(records[:, OFFSET], [start, end])
        if first == last:
            return None
        records = records[first:last]
        data = self._bodies[0] if len(self._bodies) == 1 else np.concatenate(self._bodies)
        n = len(records)
        stamps = records[:, TIMESTAMP] * 1000
        columns = [
            _binary(data, records[:, KEY_AT], records[:, KEY_LEN], pa.binary()),
            _binary(data, records[:, VALUE_AT], records[:, VALUE_LEN], pa.binary()),
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            pa.array(np.ascontiguousarray(records[:, OFFSET])),
            pa.array(stamps, pa.timestamp("us", tz="UTC")),
            pa.array(records[:, TYPE].astype(np.int32)),
        ]
        if self.with_headers:
            columns.append(self._header_column(first, last, data))
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.with_headers))

    def _header_column(self, first: int, last: int, data: np.ndarray) -> pa.Array:
        counts = self.records[:self.n, HEADER_COUNT]
        ends = np.cumsum(counts)
        begin = int(ends[first] - counts[first])
        lists = np.concatenate([[0], ends[first:last] - begin]).astype(np.int32)
        headers = self.headers[begin:int(ends[last - 1])]
        keys = _binary(data, headers[:, 0], headers[:, 1], pa.string())
        try:
            keys.validate(full=True)  # header keys are UTF-8 strings in Kafka's protocol
        except pa.ArrowInvalid:  # a producer broke that: replaced, as Spark's Kafka source does
            keys = pa.array([k.decode("utf-8", "replace")
                             for k in _binary(data, headers[:, 0], headers[:, 1], pa.binary()).to_pylist()])
        values = _binary(data, headers[:, 2], headers[:, 3], pa.binary())
        entries = pa.StructArray.from_arrays([keys, values], fields=list(HEADERS_TYPE.value_type))
        # No headers is null, not an empty list, as in Spark's Kafka source.
        return pa.ListArray.from_arrays(pa.array(lists), entries, type=HEADERS_TYPE,
                                        mask=pa.array(counts[first:last] == 0))
