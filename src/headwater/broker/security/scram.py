"""The server side of a SCRAM exchange (RFC 5802, 7677), two messages in, two out.

Written on the standard library's hmac/hashlib rather than with scramp's server, for one
compatibility fact: Kafka's broker accepts a client-final nonce that *ends with* the
nonce it sent (``endsWith`` in ScramSaslServer), and librdkafka up to at least 2.0.2
(Debian's kcat) sends its client nonce twice there. Credentials come from ``credentials``
(scramp derives them); no password is seen here.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Callable

from headwater.broker.security.credentials import ScramCredential

HASHES = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}


class ScramError(Exception):
    """A malformed message or a failed proof."""


def _attributes(message: str) -> dict[str, str]:
    attributes = {}
    for item in message.split(","):
        name, sep, value = item.partition("=")
        if not sep or len(name) != 1:
            raise ScramError(f"malformed attribute {item[:20]!r}")
        attributes.setdefault(name, value)
    return attributes


def unescape_saslname(name: str) -> str:
    # RFC 5802: ',' and '=' in user names travel as =2C and =3D
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """One exchange: ``first(client_first) -> server_first``, ``final(client_final) -> server_final``."""

    def __init__(self, mechanism: str, credential_of: Callable[[str], ScramCredential | None]):
        self.hash = HASHES[mechanism]
        self.credential_of = credential_of
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._nonce = self._client_first_bare = self._server_first = ""

    def first(self, client_first: str) -> str:
        gs2_cbind, _, rest = client_first.partition(",")
        authzid, _, bare = rest.partition(",")
        if gs2_cbind not in ("n", "y") or not bare:
            raise ScramError("client-first must start n,, or y,, (no channel binding)")
        attributes = _attributes(bare)
        if "m" in attributes or not attributes.get("n") or not attributes.get("r"):
            raise ScramError("client-first needs n= and r=, and no mandatory extension")
        self.user = unescape_saslname(attributes["n"])
        if authzid and unescape_saslname(authzid.removeprefix("a=")) != self.user:
            raise ScramError(f"user {self.user!r} may not act as {authzid!r}")
        self._credential = self.credential_of(self.user)
        if self._credential is None:
            raise ScramError(f"unknown user {self.user!r}")
        self._nonce = attributes["r"] + secrets.token_urlsafe(24)
        self._client_first_bare = bare
        salt = base64.b64encode(self._credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={self._credential.iterations}"
        return self._server_first

    def final(self, client_final: str) -> str:
        if self._credential is None:
            raise ScramError("client-final before client-first")
        without_proof, sep, proof = client_final.rpartition(",p=")
        if not sep:
            raise ScramError("client-final without a proof")
        attributes = _attributes(without_proof)
        if not attributes.get("r", "").endswith(self._nonce):  # as Kafka: see the module's comment
            raise ScramError("the client-final nonce is not the server's")
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(self._credential.stored_key, auth_message, self.hash)
        try:
            client_proof = base64.b64decode(proof, validate=True)
        except binascii.Error:
            raise ScramError("the proof is not base64") from None
        if len(client_proof) != len(signature):
            raise ScramError("the proof has the wrong length")
        client_key = bytes(a ^ b for a, b in zip(client_proof, signature))
        if not hmac.compare_digest(self.hash(client_key).digest(), self._credential.stored_key):
            raise ScramError("wrong password")
        server_signature = hmac.digest(self._credential.server_key, auth_message, self.hash)
        return "v=" + base64.b64encode(server_signature).decode()


def credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                    iterations: int) -> ScramCredential:
    """What AlterUserScramCredentials sends (RFC 5802's SaltedPassword) → the keys the broker keeps."""
    h = HASHES[mechanism]
    client_key = hmac.digest(salted_password, b"Client Key", h)
    return ScramCredential(salt, h(client_key).digest(), hmac.digest(salted_password, b"Server Key", h), iterations)
