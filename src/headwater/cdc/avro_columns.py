"""A table's columns as Avro fields: the Avro type of each PostgreSQL type or SQLite declared
affinity, and how a value becomes an Avro value.

PostgreSQL values come as text (the stream and the snapshot alike, see `pgtypes`); SQLite
values as the changelog's JSON image. numeric is a string (its exact text: PostgreSQL's numeric
has no fixed scale unless declared, and NaN; a bytes-decimal would need one). timestamp and
timestamptz are timestamp-micros (timestamp without time zone read as UTC; ±infinity as the
largest and smallest long), date is date (days since 1970-01-01). Every type without an Avro
counterpart (uuid, interval, arrays, time...) is its text, as in the JSON events.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
import json
import re
from typing import Any, Callable

from . import CdcError, pgtypes
from .envelope import UNAVAILABLE

INT2, INT4, NUMERIC, DATE, JSON_, JSONB = 21, 23, 1700, 1082, 114, 3802
_MICROS = {"type": "long", "logicalType": "timestamp-micros"}
_DAYS = {"type": "int", "logicalType": "date"}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_LONG_MAX, _LONG_MIN = 2 ** 63 - 1, -2 ** 63
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class AvroColumn:
    name: str
    type: Any  # the Avro type of a value (a key column's; the others are a union with null)
    convert: Callable[[Any], Any]  # a non-null source value -> its Avro value


def _micros(text: str) -> int:
    if text in ("infinity", "-infinity"):
        return _LONG_MAX if text == "infinity" else _LONG_MIN
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _days(text: str) -> int:
    if text in ("infinity", "-infinity"):
        return 2 ** 31 - 1 if text == "infinity" else -2 ** 31
    return (date.fromisoformat(text) - date(1970, 1, 1)).days


def _bytea(text: str) -> bytes:
    return bytes.fromhex(text[2:])


_POSTGRES: dict[int, tuple[Any, Callable[[str], Any]]] = {
    INT2: ("int", int), INT4: ("int", int), pgtypes.INT8: ("long", int), pgtypes.OID: ("long", int),
    pgtypes.FLOAT4: ("float", float), pgtypes.FLOAT8: ("double", float), pgtypes.BOOL: ("boolean", pgtypes.boolean),
    pgtypes.BYTEA: ("bytes", _bytea), pgtypes.TIMESTAMP: (_MICROS, _micros), pgtypes.TIMESTAMPTZ: (_MICROS, _micros),
    DATE: (_DAYS, _days),
}
_TEXT = ("string", str)  # text, varchar, numeric, json, jsonb and every other type: the text itself


def postgres_column(name: str, type_oid: int) -> AvroColumn:
    avro_type, convert = _POSTGRES.get(type_oid, _TEXT)
    return AvroColumn(name, avro_type, convert)


def _sqlite_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _sqlite_long(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{value!r} is not an integer")
    return value


def _sqlite_double(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    return float(value)


def sqlite_column(name: str, declared: str) -> AvroColumn:
    """By SQLite's affinity rules (the first that matches): INT integer -> long; CHAR, CLOB,
    TEXT -> string; BLOB -> bytes; REAL, FLOA, DOUB -> double; the rest (NUMERIC affinity and
    no declared type, which hold any kind of value) -> string, a number's JSON text."""
    upper = declared.upper()
    if "INT" in upper:
        return AvroColumn(name, "long", _sqlite_long)
    if any(word in upper for word in ("CHAR", "CLOB", "TEXT")):
        return AvroColumn(name, "string", _sqlite_text)
    if "BLOB" in upper:
        return AvroColumn(name, "bytes", base64.b64decode)  # the changelog's blobs arrive as base64
    if any(word in upper for word in ("REAL", "FLOA", "DOUB")):
        return AvroColumn(name, "double", _sqlite_double)
    return AvroColumn(name, "string", _sqlite_text)


def unavailable(column: AvroColumn) -> Any:
    """What an unchanged TOASTed value holds in `after`: the JSON events' marker, as bytes in a bytes column."""
    return UNAVAILABLE.encode() if column.type == "bytes" else UNAVAILABLE


def check_names(table: str, columns: list[AvroColumn]) -> None:
    for column in columns:
        if not _AVRO_NAME.fullmatch(column.name):
            raise CdcError(f"table {table}: column {column.name!r} is not a valid Avro field name (letters, digits "
                           "and '_', not starting with a digit): rename it or capture the table without "
                           "--schema-registry")
