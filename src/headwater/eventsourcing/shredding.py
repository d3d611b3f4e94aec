"""Crypto-shredding: fields declared personal are encrypted with a key per data subject
(AES-GCM from the `cryptography` package). Deleting the subject's key makes those fields
unreadable in the store, in the topic the relay fills and in every replay, while the rest
of each event still replays. Each ciphertext names the key it was sealed with (a digest of
the key), so after an erasure a new key for the same subject opens what it sealed and
leaves what the deleted key sealed unreadable, never unreadable to the point of failing.
The keys are the store's key rows, reached through `SubjectKeys` (its `forget` erases one)."""
from __future__ import annotations

import base64
import hashlib
import json
import os
from dataclasses import dataclass, field
from typing import Any, Protocol

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from headwater.eventsourcing.events import MalformedEvent

ENCRYPTED = "$encrypted"  # a personal field as stored: {"$encrypted": base64(nonce + ciphertext), "key": key id}
KEY_ID = "key"
FORGOTTEN = None          # what a personal field reads as once its subject is forgotten


class SubjectKeys(Protocol):
    """Where the keys are kept: the event store's key rows."""

    def subject_key(self, subject: str) -> bytes | None: ...

    def keep_subject_key(self, subject: str, key: bytes) -> bytes: ...


@dataclass(frozen=True)
class Personal:
    subject_field: str          # the body field naming whose data it is (kept in clear)
    fields: tuple[str, ...]     # the body fields to encrypt


@dataclass
class PersonalData:
    """Which fields of which event types are personal: {event type: Personal(...)}."""
    declared: dict[str, Personal] = field(default_factory=dict)

    def encrypt(self, keys: SubjectKeys, event_type: str, body: dict[str, Any]) -> dict[str, Any]:
        rule = self.declared.get(event_type)
        if rule is None:
            return body
        subject = body.get(rule.subject_field)
        if not isinstance(subject, str) or not subject:
            raise MalformedEvent(f"{event_type}: personal data needs a subject in field {rule.subject_field!r}")
        key = keys.subject_key(subject) or keys.keep_subject_key(subject, AESGCM.generate_key(bit_length=256))
        aead = AESGCM(key)
        sealed = dict(body)
        for name in rule.fields:
            if name in body:
                nonce = os.urandom(12)
                ciphertext = aead.encrypt(nonce, json.dumps(body[name]).encode(), _aad(subject, name))
                sealed[name] = {ENCRYPTED: base64.b64encode(nonce + ciphertext).decode(), KEY_ID: key_id(key)}
        return sealed

    def decrypt(self, keys: SubjectKeys, event_type: str, body: dict[str, Any]) -> dict[str, Any]:
        rule = self.declared.get(event_type)
        if rule is None:
            return body
        subject = body.get(rule.subject_field)
        key = keys.subject_key(subject)
        current = key_id(key) if key is not None else None
        opened = dict(body)
        for name in rule.fields:
            value = body.get(name)
            if not (isinstance(value, dict) and ENCRYPTED in value):
                continue
            if current is None or value.get(KEY_ID, current) != current:
                opened[name] = FORGOTTEN  # no key, or sealed with a key deleted since
                continue
            sealed = base64.b64decode(value[ENCRYPTED])
            try:
                opened[name] = json.loads(AESGCM(key).decrypt(sealed[:12], sealed[12:], _aad(subject, name)))
            except InvalidTag:
                if KEY_ID not in value:  # sealed before key ids were kept: perhaps with a key deleted since
                    opened[name] = FORGOTTEN
                    continue
                raise MalformedEvent(f"{event_type}: field {name!r} of {subject!r} fails authentication") from None
        return opened


def _aad(subject: str, name: str) -> bytes:
    # binds each ciphertext to its subject and field: it cannot be moved to another
    return f"{subject}\0{name}".encode()


def key_id(key: bytes) -> str:
    """Names a key without revealing it: which key sealed a field, kept beside the ciphertext."""
    return hashlib.sha256(key).hexdigest()[:16]
