"""The SASL exchange of one connection, as a state machine (sans-IO: tokens in, tokens out).

    HANDSHAKE --SaslHandshake(known mechanism)--> AUTHENTICATING --tokens--> AUTHENTICATED
                                                               \\--bad token--> FAILED

PLAIN (RFC 4616) is one token, ``authzid NUL user NUL password``. SCRAM-SHA-256/512
(RFC 5802, 7677) is two rounds, run by ``scram.ScramServer`` against the stored keys. Failure is final:
the server answers SASL_AUTHENTICATION_FAILED and closes the connection.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from headwater.broker.security.credentials import MECHANISMS as SCRAM_MECHANISMS
from headwater.broker.security.credentials import CredentialStore
from headwater.broker.security.scram import ScramError, ScramServer
from headwater.protocol.errors import ErrorCode

ALL_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)
MAX_TOKEN_BYTES = 64 * 1024  # no SASL token of PLAIN or SCRAM comes near this


class State(Enum):
    HANDSHAKE = auto()
    AUTHENTICATING = auto()
    AUTHENTICATED = auto()
    FAILED = auto()


class AuthenticationFailed(Exception):
    """Why a client was refused; logged with its address, never sent in detail (no user probing)."""


@dataclass(frozen=True)
class Step:
    error: ErrorCode
    reply: bytes = b""
    message: str | None = None


class SaslExchange:
    def __init__(self, credentials: CredentialStore, enabled: tuple[str, ...] = ALL_MECHANISMS):
        self.credentials = credentials
        self.enabled = enabled
        self.state = State.HANDSHAKE
        self.mechanism: str | None = None
        self.user: str | None = None
        self.failure: str | None = None  # for the log, when FAILED
        self._scram = None

    def handshake(self, mechanism: str) -> ErrorCode:
        if self.state is not State.HANDSHAKE:
            return ErrorCode.ILLEGAL_SASL_STATE
        if mechanism not in self.enabled:
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM
        self.mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramServer(mechanism, lambda user: self.credentials.credential(user, mechanism))
        self.state = State.AUTHENTICATING
        return ErrorCode.NONE

    def authenticate(self, token: bytes) -> Step:
        if self.state is not State.AUTHENTICATING:
            return Step(ErrorCode.ILLEGAL_SASL_STATE, message="SaslAuthenticate before SaslHandshake")
        try:
            if len(token) > MAX_TOKEN_BYTES:
                raise AuthenticationFailed(f"a {len(token)}-byte token")
            if self.mechanism == "PLAIN":
                return self._plain(token)
            return self._scram_step(token)
        except (AuthenticationFailed, ScramError, UnicodeDecodeError) as exc:
            self.state = State.FAILED
            self.failure = f"{type(exc).__name__}: {exc}"
            return Step(ErrorCode.SASL_AUTHENTICATION_FAILED,
                        message=f"Authentication failed: invalid credentials with SASL mechanism {self.mechanism}")

    @property
    def principal(self) -> str | None:
        return f"User:{self.user}" if self.state is State.AUTHENTICATED else None

    def _plain(self, token: bytes) -> Step:
        parts = token.decode("utf-8").split("\0")
        if len(parts) != 3:
            raise AuthenticationFailed("a PLAIN token is authzid NUL user NUL password")
        authzid, user, password = parts
        if authzid and authzid != user:
            raise AuthenticationFailed(f"user {user!r} may not act as {authzid!r}")
        if not self.credentials.check_password(user, password):
            raise AuthenticationFailed(f"wrong password or unknown user {user!r}")
        return self._authenticated(user, b"")

    def _scram_step(self, token: bytes) -> Step:
        text = token.decode("utf-8")
        if self._scram.user is None:
            return Step(ErrorCode.NONE, self._scram.first(text).encode())
        return self._authenticated(self._scram.user, self._scram.final(text).encode())

    def _authenticated(self, user: str, reply: bytes) -> Step:
        self.user = user
        self.state = State.AUTHENTICATED
        return Step(ErrorCode.NONE, reply)
