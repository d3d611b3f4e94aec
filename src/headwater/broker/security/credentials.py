"""SCRAM credentials in the data directory: salted, iterated keys, never a password.

One JSON file, ``scram-credentials.json``: user → mechanism → salt, StoredKey, ServerKey
and iterations (RFC 5802), the form Kafka keeps in its metadata. PLAIN is checked against
the same keys (the password is salted and iterated and compared with StoredKey), so a user
created once authenticates with PLAIN and both SCRAM mechanisms. The file is written by
``headwater users`` (atomically) and re-read by a running broker when it changes.
"""
from __future__ import annotations

import base64
import hmac
from dataclasses import dataclass
from pathlib import Path

from scramp import ScramMechanism

from headwater.broker.security.watched_file import WatchedJson

FILE_NAME = "scram-credentials.json"
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
DEFAULT_ITERATIONS = 8192   # Kafka's tools default to 4096; RFC 7677 asks for at least 4096


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict:
        b64 = lambda b: base64.b64encode(b).decode()
        return {"salt": b64(self.salt), "stored_key": b64(self.stored_key), "server_key": b64(self.server_key),
                "iterations": self.iterations}

    @classmethod
    def from_json(cls, d: dict) -> ScramCredential:
        return cls(base64.b64decode(d["salt"]), base64.b64decode(d["stored_key"]),
                   base64.b64decode(d["server_key"]), int(d["iterations"]))


def make_credential(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    return ScramCredential(*ScramMechanism(mechanism).make_auth_info(password, iterations, salt))


class CredentialStore:
    def __init__(self, data_dir: Path):
        self.file = WatchedJson(Path(data_dir) / FILE_NAME, lambda raw: {
            user: {m: ScramCredential.from_json(c) for m, c in mechs.items()} for user, mechs in raw.items()}, {})

    @property
    def path(self) -> Path:
        return self.file.path

    def _load(self) -> dict[str, dict[str, ScramCredential]]:
        return self.file.load()

    def users(self) -> dict[str, list[str]]:
        """User → the mechanisms it has credentials for."""
        return {user: sorted(mechs) for user, mechs in sorted(self._load().items())}

    def credential(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._load().get(user, {}).get(mechanism)

    def check_password(self, user: str, password: str) -> bool:
        """PLAIN: derive the key from the password with the user's stored salt and compare."""
        for mechanism, credential in self._load().get(user, {}).items():
            derived = make_credential(mechanism, password, credential.iterations, credential.salt)
            return hmac.compare_digest(derived.stored_key, credential.stored_key)
        return False

    def set(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        users = dict(self._load())
        users[user] = {**users.get(user, {}), mechanism: credential}
        self._save(users)

    def delete(self, user: str, mechanism: str | None = None) -> bool:
        """Remove one mechanism's credential, or every one of the user's; False when there was none."""
        users = dict(self._load())
        mechs = dict(users.get(user, {}))
        removed = mechs.pop(mechanism, None) is not None if mechanism else bool(mechs)
        if mechanism is None or not mechs:
            users.pop(user, None)
        else:
            users[user] = mechs
        if removed:
            self._save(users)
        return removed

    def _save(self, users: dict[str, dict[str, ScramCredential]]) -> None:
        self.file.save({u: {m: c.to_json() for m, c in ms.items()} for u, ms in users.items()})
