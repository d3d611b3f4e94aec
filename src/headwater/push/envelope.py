"""What a push endpoint receives: one POST per record (or per batch), its JSON body and its headers.

Body of one record (UTF-8 JSON; bytes in base64 so any record survives the trip):
    {"topic": str, "partition": int, "offset": int, "timestamp": int (ms) | null,
     "key": base64 | null, "value": base64 | null,
     "headers": [{"key": str, "value": base64 | null}], "attempt": int}
Headers: Headwater-Topic, Headwater-Partition, Headwater-Offset, Headwater-Key (base64, absent
for a null key), Headwater-Delivery-Attempt (1 on the first try), and with a shared secret
Headwater-Signature: sha256=<hex HMAC-SHA256 of the exact body bytes>, as GitHub signs its webhooks.

A batch (records of one partition, in offset order) is a JSON array of the same objects, with
Headwater-Topic, Headwater-Partition, Headwater-Batch-Size, Headwater-Delivery-Attempt and the
signature as headers; a 2xx acknowledges every record in it.
"""
from __future__ import annotations

import hashlib
import hmac
from binascii import b2a_base64
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

SIGNATURE_HEADER = "Headwater-Signature"
BATCH_SIZE_HEADER = "Headwater-Batch-Size"


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
    return None if data is None else b2a_base64(data, newline=False).decode("ascii")


def _fields(record: Record, attempt: int) -> dict:
    return {"topic": record.topic, "partition": record.partition, "offset": record.offset,
            "timestamp": record.timestamp, "key": _b64(record.key), "value": _b64(record.value),
            "headers": [{"key": k, "value": _b64(v)} for k, v in record.headers], "attempt": attempt}


def body(record: Record, attempt: int) -> bytes:
    return orjson.dumps(_fields(record, attempt))


def batch_body(records: Sequence[Record], attempt: int) -> bytes:
    return orjson.dumps([_fields(record, attempt) for record in records])


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
    return _signed(out, payload, secret)


def batch_headers(records: Sequence[Record], attempt: int, payload: bytes, secret: bytes | None) -> dict[str, str]:
    first = records[0]
    return _signed({"Content-Type": "application/json", "Headwater-Topic": first.topic,
                    "Headwater-Partition": str(first.partition), BATCH_SIZE_HEADER: str(len(records)),
                    "Headwater-Delivery-Attempt": str(attempt)}, payload, secret)


def _signed(out: dict[str, str], payload: bytes, secret: bytes | None) -> dict[str, str]:
    if secret is not None:
        out[SIGNATURE_HEADER] = signature(secret, payload)
    return out
