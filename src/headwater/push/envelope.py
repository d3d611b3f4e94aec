"""What a push endpoint receives: one POST per record, its JSON body and its headers.

Body (UTF-8 JSON; bytes in base64 so any record survives the trip):
    {"topic": str, "partition": int, "offset": int, "timestamp": int (ms) | null,
     "key": base64 | null, "value": base64 | null,
     "headers": [{"key": str, "value": base64 | null}], "attempt": int}
Headers: Headwater-Topic, Headwater-Partition, Headwater-Offset, Headwater-Key (base64, absent
for a null key), Headwater-Delivery-Attempt (1 on the first try), and with a shared secret
Headwater-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>, as GitHub signs its webhooks.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass

SIGNATURE_HEADER = "Headwater-Signature"


@dataclass(frozen=True)
class Record:
    """One record as the consumer gave it; plain data, so deliveries need no client object."""
    topic: str
    partition: int
    offset: int
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def body(record: Record, attempt: int) -> bytes:
    return json.dumps({
        "topic": record.topic, "partition": record.partition, "offset": record.offset,
        "timestamp": record.timestamp, "key": _b64(record.key), "value": _b64(record.value),
        "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers], "attempt": attempt,
    }, separators=(",", ":")).encode()


def signature(secret: bytes, payload: bytes) -> str:
    return "sha256=" + hmac.new(secret, payload, hashlib.sha256).hexdigest()


def verify(secret: bytes, payload: bytes, header: str | None) -> bool:
    """For endpoints: does the Headwater-Signature header match this body? (constant-time)"""
    return header is not None and hmac.compare_digest(signature(secret, payload), header)


def headers(record: Record, attempt: int, payload: bytes, secret: bytes | None) -> dict[str, str]:
    out = {"Content-Type": "application/json", "Headwater-Topic": record.topic,
           "Headwater-Partition": str(record.partition), "Headwater-Offset": str(record.offset),
           "Headwater-Delivery-Attempt": str(attempt)}
    if record.key is not None:
        out["Headwater-Key"] = _b64(record.key)
    if secret is not None:
        out[SIGNATURE_HEADER] = signature(secret, payload)
    return out
