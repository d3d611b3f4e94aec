"""The log validator: what a client may append to a partition (Kafka's ``LogValidator``).

``validate`` is the one entry: it takes a topic's ``AppendRules`` and returns the batches to
append, or a ``Refusal`` naming the error Kafka answers with. No I/O: safe on any thread."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import NamedTuple

import numpy as np

from .codecs import Compression
from .decoding import decode_records
from .encoding import recompressed
from .errors import CorruptRecordError, InvalidRecordError
from .layout import (ATTR_LOG_APPEND_TIME, DECOMPRESSION_RATIO, BatchHeader, iter_batches, read_header, records_section,
                     reseal_crc, set_max_timestamp)
from .varint import VARINT_MAX_BYTES, read_varint


@dataclass(frozen=True, slots=True)
class AppendRules:
    """What the validator needs of a topic's configs (``LogConfig.append_rules``). Frozen: one is
    kept per LogConfig and shared by every append to the topic, on the loop and the validator thread."""
    max_request_bytes: int    # the broker's message.max.bytes: all the batches of one append
    max_batch_bytes: int      # the topic's max.message.bytes: each batch as it is stored
    keys_required: bool = False          # cleanup.policy=compact
    log_append_time: bool = False        # message.timestamp.type=LogAppendTime: record times are not checked
    timestamp_before_max_ms: int | None = None  # refuse records older than now minus this
    timestamp_after_max_ms: int | None = None   # refuse records newer than now plus this
    compression: Compression | None = None      # compression.type's codec to store batches in; None: the producer's


class Refused(Enum):
    """Why an append is refused, named as the Kafka error code the broker answers with."""
    CORRUPT_MESSAGE = auto()     # framing, magic or CRC: damaged on the way, a retry may help
    INVALID_RECORD = auto()      # sealed by its producer but against the format or the topic's rules
    INVALID_TIMESTAMP = auto()   # records outside message.timestamp.before/after.max.ms
    MESSAGE_TOO_LARGE = auto()   # over message.max.bytes, or a batch over max.message.bytes


@dataclass(frozen=True, slots=True)
class Refusal:
    error: Refused
    message: str
    record_errors: list[tuple[int, str]] = field(default_factory=list)  # (index in its batch, why): KIP-467


class Appendable(NamedTuple):
    """Batches that passed: the buffer to append and (position, header) of each batch in it."""
    buf: bytearray
    batches: list[tuple[int, BatchHeader]]


def validate(records: bytes | None, rules: AppendRules, now_ms: int,
             decompression_budget: int | None = None) -> Appendable | Refusal:
    """Kafka's log validator for what a client appends to one partition: the batches' own checks
    (``validate_produce``), the records' timestamps against the topic's bounds at ``now_ms``,
    the topic's codec (batches are recompressed to it), and the sizes both before and after.
    A ``decompression_budget`` lowers the bound a batch may decompress to (never raises it): what
    passes within it passes Kafka's bound too, what is refused may not be refused by Kafka's."""
    if not records:
        return Refusal(Refused.INVALID_RECORD, "no record batch in the request")
    if len(records) > rules.max_request_bytes:
        return _over_request_limit(records, rules)
    buf = bytearray(records)
    bound = rules.max_request_bytes * DECOMPRESSION_RATIO
    try:
        batches = validate_produce(buf, max_uncompressed_bytes=bound if decompression_budget is None
                                   else min(bound, decompression_budget), keys_required=rules.keys_required)
    except InvalidRecordError as exc:
        return Refusal(Refused.INVALID_RECORD, str(exc), exc.record_errors)
    except CorruptRecordError as exc:
        return Refusal(Refused.CORRUPT_MESSAGE, str(exc))
    return _topic_rules(buf, batches, rules, now_ms)


def validate_own(batch: bytes, keyless: list[int], rules: AppendRules, now_ms: int) -> Appendable | Refusal:
    """``validate`` for one batch the broker encoded itself (``encode_batch``, as the HTTP API's
    produce does), whose records without a key are at ``keyless``: well-formed by construction,
    so its records are not walked again; the sizes and the topic's rules are checked as for a client's."""
    if len(batch) > rules.max_request_bytes:
        return _over_request_limit(batch, rules)
    if keyless and rules.keys_required:
        return Refusal(Refused.INVALID_RECORD, _keyless_error(keyless[0]), [(i, KEYLESS_ON_COMPACTED) for i in keyless])
    return _topic_rules(bytearray(batch), [(0, read_header(batch))], rules, now_ms)


def _over_request_limit(records: bytes, rules: AppendRules) -> Refusal:
    return Refusal(Refused.MESSAGE_TOO_LARGE,
                   f"{len(records)} bytes exceed message.max.bytes {rules.max_request_bytes}")


def _topic_rules(buf: bytearray, batches: list[tuple[int, BatchHeader]], rules: AppendRules,
                 now_ms: int) -> Appendable | Refusal:
    """The checks of well-formed batches against the topic: record timestamps, its codec, its batch size."""
    stamped = [header for _, header in batches if header.attributes & ATTR_LOG_APPEND_TIME]
    if stamped:  # the broker stamps LogAppendTime, on any topic: Kafka refuses every record of such a batch
        return Refusal(Refused.INVALID_TIMESTAMP, PRODUCER_LOG_APPEND_TIME,
                       [(index, PRODUCER_LOG_APPEND_TIME) for index in range(stamped[0].records_count)])
    out_of_range = _timestamp_errors(buf, batches, rules, now_ms)
    if out_of_range:
        return Refusal(Refused.INVALID_TIMESTAMP, out_of_range[0][1], out_of_range)
    if rules.compression is not None:
        buf, batches = _recompressed(buf, batches, rules.compression)
    for _, header in batches:
        if header.size > rules.max_batch_bytes:
            return Refusal(Refused.MESSAGE_TOO_LARGE, f"a batch of {header.size} bytes exceeds the topic's "
                           f"max.message.bytes {rules.max_batch_bytes}")
    return Appendable(buf, batches)


def validate_produce(buf: bytearray, *, max_uncompressed_bytes: int,
                     keys_required: bool = False) -> list[tuple[int, BatchHeader]]:
    """The checks of the batches themselves, whatever the topic: returns (position, header) of
    each. Framing, magic or CRC wrong: CorruptRecordError. Intact but
    invalid (InvalidRecordError): a control batch, an unknown codec, a body that does not
    decompress within ``max_uncompressed_bytes``, a record count that is not lastOffsetDelta
    + 1, a record whose lengths, varints or offset delta do not hold, bytes after the last
    record, a record timestamp past 64 bits, a record without a key when ``keys_required``.

    A CreateTime batch's max timestamp is the broker's to compute, as Kafka's: one that is not
    its records' latest (librdkafka writes 0 when they carry -1) is rewritten in ``buf`` and the
    CRC re-sealed, never a reason to drop the client's data."""
    batches = list(iter_batches(buf))
    # the batches lie end to end from byte 0 (iter_batches' walk), so the last one's end is their sizes' sum
    if not batches or batches[-1][0] + batches[-1][1].size != len(buf):
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


NO_TIMESTAMP = -1  # Kafka's RecordBatch.NO_TIMESTAMP


def _timestamp_errors(buf, batches: list[tuple[int, BatchHeader]], rules: AppendRules,
                     now_ms: int) -> list[tuple[int, str]]:
    """(index in its batch, why) of each record whose CreateTime is out of the topic's bounds;
    as Kafka, never a record without a timestamp (-1)."""
    before, after = rules.timestamp_before_max_ms, rules.timestamp_after_max_ms
    if rules.log_append_time or (before is None and after is None):
        return []
    earliest = now_ms - before if before is not None else None
    latest = now_ms + after if after is not None else None
    errors = []
    for pos, _ in batches:
        for index, record in enumerate(decode_records(buf, pos)[1]):
            if record.timestamp == NO_TIMESTAMP:
                continue
            if earliest is not None and record.timestamp < earliest:
                errors.append((index, f"timestamp {record.timestamp} is more than message.timestamp.before.max.ms "
                                      f"{before} before the broker's time {now_ms}"))
            elif latest is not None and record.timestamp > latest:
                errors.append((index, f"timestamp {record.timestamp} is more than message.timestamp.after.max.ms "
                                      f"{after} after the broker's time {now_ms}"))
    return errors


def _recompressed(buf: bytearray, batches: list[tuple[int, BatchHeader]],
                  codec: Compression) -> tuple[bytearray, list[tuple[int, BatchHeader]]]:
    """The batches in the topic's codec, as Kafka's broker stores them (unchanged when already in it)."""
    if all(header.compression == codec for _, header in batches):
        return buf, batches
    out = bytearray()
    for pos, header in batches:
        out += buf[pos:pos + header.size] if header.compression == codec else recompressed(buf, pos, header, codec)
    return out, list(iter_batches(out, validate=False))



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


PRODUCER_LOG_APPEND_TIME = "a producer may not set a batch's timestamp type to LogAppendTime"
KEYLESS_ON_COMPACTED = "a compacted topic (cleanup.policy=compact) refuses records without a key"


def _keyless_error(index: int) -> str:
    return f"record {index} is without a key, which a compacted topic (cleanup.policy=compact) refuses"


# The compiled walk, once a process has loaded it (load_compiled_walk: the broker does as it
# starts). Not imported with this module: numba costs ~0.2 s and ~60 MB to import, which every
# program that reads a log's configs (the CLI's commands among them) would pay for nothing.
_compiled_walk = None


def load_compiled_walk() -> None:
    """Judge records with the compiled walk from now on, its machine code loaded now."""
    global _compiled_walk
    from . import compiled_walk
    compiled_walk.load()
    _compiled_walk = compiled_walk


def _check_records(body, count: int, keys_required: bool) -> int:
    """Check ``count`` records; return the largest timestamp delta. The compiled walk, if loaded,
    judges; what it does not call valid, the Python walk decides, and words the error."""
    walk = _compiled_walk
    if walk is not None:
        verdict, max_delta = walk.records_max_delta(np.frombuffer(body, np.uint8), count, keys_required)
        if verdict == walk.VALID:
            return max_delta
    return _walk_records(body, count, keys_required)


def _walk_records(body, count: int, keys_required: bool) -> int:
    """Walk ``count`` records without copying them out; return the largest timestamp delta.
    A field length that overshoots its record needs no check of its own: the walk then
    cannot end exactly at the record's end."""
    p, end, max_delta = 0, len(body), None
    try:
        for index in range(count):
            length, p = read_varint(body, p, VARINT_MAX_BYTES)
            record_end = p + length
            if length < 1 or record_end > end:
                raise InvalidRecordError(f"record {index}: length {length} does not fit the batch")
            ts_delta, p = read_varint(body, p + 1)  # +1: the record attributes, unused
            off_delta, p = read_varint(body, p, VARINT_MAX_BYTES)
            if off_delta != index:
                raise InvalidRecordError(f"record {index} has offset delta {off_delta}")
            key_length, p = read_varint(body, p, VARINT_MAX_BYTES)
            if key_length < 0 and keys_required:
                raise InvalidRecordError(_keyless_error(index))
            p = _skip_field(p, key_length, index, "key")
            value_length, p = read_varint(body, p, VARINT_MAX_BYTES)
            p = _skip_field(p, value_length, index, "value")
            n_headers, p = read_varint(body, p, VARINT_MAX_BYTES)
            if n_headers < 0:
                raise InvalidRecordError(f"record {index} has {n_headers} headers")
            for _ in range(n_headers):
                hkey_length, p = read_varint(body, p, VARINT_MAX_BYTES)
                if hkey_length < 0:
                    raise InvalidRecordError(f"record {index} has a header with a null key")
                p += hkey_length
                hvalue_length, p = read_varint(body, p, VARINT_MAX_BYTES)
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
