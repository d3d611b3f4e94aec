"""PostgreSQL text output -> JSON values, by column type.

The stream (pgoutput text tuples) and the snapshot (columns read as `::text`) both give the
text form, so one converter types both alike. The connections run with TimeZone=UTC,
DateStyle=ISO and IntervalStyle=iso_8601 (see `SESSION_OPTIONS`).
"""
from __future__ import annotations

import base64
import re
from typing import Any, Callable

SESSION_OPTIONS = "-c TimeZone=UTC -c DateStyle=ISO -c IntervalStyle=iso_8601 -c bytea_output=hex"

BOOL, BYTEA, INT8, INT2, INT4, OID = 16, 17, 20, 21, 23, 26
FLOAT4, FLOAT8 = 700, 701
TIMESTAMP, TIMESTAMPTZ, TIMETZ = 1114, 1184, 1266

_INTEGERS = {INT8, INT2, INT4, OID}
_HOUR_ONLY_OFFSET = re.compile(r"[+-]\d\d$")


def _iso_timestamp(text: str) -> str:
    if text in ("infinity", "-infinity") or text.endswith(" BC"):
        return text  # no ISO-8601 form; passed through as PostgreSQL wrote it
    text = text.replace(" ", "T", 1)
    return text + ":00" if _HOUR_ONLY_OFFSET.search(text) else text


def _float(text: str) -> float | str:
    value = float(text)
    return value if value - value == 0 else text  # NaN and infinities are not JSON numbers


def _timetz(text: str) -> str:
    return text + ":00" if _HOUR_ONLY_OFFSET.search(text) else text


def boolean(text: str) -> bool:
    return text in ("t", "true")  # the stream sends t/f, a snapshot's ::text true/false


def _bytea(text: str) -> str:
    return base64.b64encode(bytes.fromhex(text[2:])).decode()


_CONVERTERS: dict[int, Callable[[str], Any]] = {
    **dict.fromkeys(_INTEGERS, int), BOOL: boolean, FLOAT4: _float, FLOAT8: _float,
    TIMESTAMP: _iso_timestamp, TIMESTAMPTZ: _iso_timestamp, TIMETZ: _timetz, BYTEA: _bytea,
}


def converter(type_oid: int) -> Callable[[str], Any] | None:
    """How a type's (non-null) text becomes JSON, or None where the text is its JSON value:
    looked up once per column, not per value."""
    return _CONVERTERS.get(type_oid)


def to_json(type_oid: int, text: str | None) -> Any:
    """One column value as JSON: numbers, booleans, strings (numeric stays a string: no loss)."""
    convert = converter(type_oid)
    return text if text is None or convert is None else convert(text)
