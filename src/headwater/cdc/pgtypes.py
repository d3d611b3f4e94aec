"""PostgreSQL text output -> JSON values, by column type.

The stream (pgoutput text tuples) and the snapshot (columns read as `::text`) both give the
text form, so one converter types both alike. The connections run with TimeZone=UTC,
DateStyle=ISO and IntervalStyle=iso_8601 (see `SESSION_OPTIONS`).
"""
from __future__ import annotations

import base64
import re
from typing import Any

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


def to_json(type_oid: int, text: str | None) -> Any:
    """One column value as JSON: numbers, booleans, strings (numeric stays a string: no loss)."""
    if text is None:
        return None
    if type_oid in _INTEGERS:
        return int(text)
    if type_oid == BOOL:
        return text == "t"
    if type_oid in (FLOAT4, FLOAT8):
        value = float(text)
        return value if value - value == 0 else text  # NaN and infinities are not JSON numbers
    if type_oid in (TIMESTAMP, TIMESTAMPTZ):
        return _iso_timestamp(text)
    if type_oid == TIMETZ:
        return text + ":00" if _HOUR_ONLY_OFFSET.search(text) else text
    if type_oid == BYTEA:
        return base64.b64encode(bytes.fromhex(text[2:])).decode()
    return text
