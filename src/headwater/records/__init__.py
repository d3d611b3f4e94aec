"""Kafka record batches (magic v2): the unit the log stores and the wire carries.

The one owner of the batch layout, a module per job: ``layout`` (header fields by name and
their setters, the CRC, framing), ``codecs``, ``varint``, ``encoding`` and ``decoding`` of
records, ``control`` (transaction markers) and ``validator``, the log validator. The broker
stores each batch as its producer sent it (stamping the base offset, and rewriting a max
timestamp its records contradict) once ``validate_produce`` has walked its records; opening
records into objects (``decode_records``) is for the few places that need keys and values:
the log cleaner, internal topics, tools and tests.
"""
from .codecs import Compression, compress, decompress
from .control import CONTROL_ABORT, CONTROL_COMMIT, encode_marker, marker_is_commit
from .decoding import compiled_records, decode_records, record_boundaries
from .encoding import Record, encode_batch, recompressed, with_records
from .errors import CorruptRecordError, InvalidRecordError
from .layout import (ATTR_COMPRESSION_MASK, ATTR_CONTROL, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, ATTRIBUTES_AT,
                     BASE_TIMESTAMP_AT, BATCH_LENGTH_AT, CRC_AT, CRC_START, DECOMPRESSION_RATIO, HEADER, HEADER_SIZE,
                     LAST_OFFSET_DELTA_AT, LOG_OVERHEAD, MAGIC, MAGIC_AT, MAX_TIMESTAMP_AT, MESSAGE_MAX_BYTES,
                     MIN_BATCH_LENGTH, NO_PRODUCER_ID, NO_SEQUENCE, PARTITION_LEADER_EPOCH_AT, RECORDS_COUNT_AT,
                     BatchHeader, is_compressed, iter_batches, read_header, records_section, reseal_crc,
                     set_base_offset, set_last_offset_delta, set_log_append_time, set_max_timestamp,
                     set_partition_leader_epoch, uncompressed_bound, validate_batch)
from .validator import KEYLESS_ON_COMPACTED, validate_produce
from .varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES

__all__ = [
    "ATTRIBUTES_AT", "ATTR_COMPRESSION_MASK", "ATTR_CONTROL", "ATTR_LOG_APPEND_TIME", "ATTR_TRANSACTIONAL",
    "BASE_TIMESTAMP_AT", "BATCH_LENGTH_AT", "CONTROL_ABORT", "CONTROL_COMMIT", "CRC_AT", "CRC_START",
    "DECOMPRESSION_RATIO", "HEADER", "HEADER_SIZE", "KEYLESS_ON_COMPACTED", "LAST_OFFSET_DELTA_AT", "LOG_OVERHEAD",
    "MAGIC", "MAGIC_AT", "MAX_TIMESTAMP_AT", "MESSAGE_MAX_BYTES", "MIN_BATCH_LENGTH", "NO_PRODUCER_ID", "NO_SEQUENCE",
    "PARTITION_LEADER_EPOCH_AT", "RECORDS_COUNT_AT", "VARINT_MAX_BYTES", "VARLONG_MAX_BYTES", "BatchHeader",
    "Compression", "CorruptRecordError", "InvalidRecordError", "Record", "compiled_records", "compress",
    "decode_records", "decompress", "encode_batch", "encode_marker", "is_compressed", "iter_batches",
    "marker_is_commit", "read_header", "record_boundaries", "recompressed", "records_section", "reseal_crc",
    "set_base_offset", "set_last_offset_delta", "set_log_append_time", "set_max_timestamp",
    "set_partition_leader_epoch", "uncompressed_bound", "validate_batch", "validate_produce", "with_records",
]
