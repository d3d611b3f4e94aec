"""Kafka record batches (magic v2): the unit the log stores and the wire carries, and the only
place that knows their byte positions. A module per job: ``layout`` (header fields by name
and their setters, the CRC, framing), ``codecs``, ``varint``, ``encoding`` and ``decoding`` of
records, ``control`` (transaction markers) and ``validator``, the log validator.

The broker stores each batch as its producer sent it (stamping the base offset, and rewriting
a max timestamp its records contradict) once the validator has walked its records; opening
records into objects (``decode_records``) is for the few places that need keys and values:
the log cleaner, internal topics, tools and tests.

Imported from here: the everyday names of whoever produces or reads batches. Byte positions,
setters, codecs, markers and the validator are imported from the module that owns them, so
an import says when its user reaches into the layout.
"""
from .codecs import Compression
from .decoding import decode_records
from .encoding import Record, encode_batch
from .errors import CorruptRecordError, InvalidRecordError
from .layout import BatchHeader, iter_batches, read_header

__all__ = ["BatchHeader", "Compression", "CorruptRecordError", "InvalidRecordError", "Record", "decode_records",
           "encode_batch", "iter_batches", "read_header"]
