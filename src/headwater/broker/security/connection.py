"""One client connection's security: the listener it came in on, its SASL exchange, its principal.

Before a SASL listener's exchange succeeds, a connection may send nothing but ApiVersions
and the exchange itself (as Kafka: anything else closes the connection unanswered).
"""
from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from headwater.broker.security.listeners import Listener
from headwater.broker.security.sasl import SaslExchange, State
from headwater.protocol.messages import ApiKey

PRE_AUTHENTICATION_APIS = frozenset({ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
ANONYMOUS = "User:ANONYMOUS"


@dataclass
class Connection:
    listener: Listener
    peer: str
    sasl: SaslExchange | None = None   # on SASL listeners
    tls_principal: str | None = None   # User:<certificate subject>, with mTLS

    @property
    def authenticated(self) -> bool:
        return self.sasl is None or self.sasl.state is State.AUTHENTICATED

    @property
    def failed(self) -> bool:
        return self.sasl is not None and self.sasl.state is State.FAILED

    @property
    def principal(self) -> str:
        if self.sasl is not None:
            return self.sasl.principal or ANONYMOUS
        return self.tls_principal or ANONYMOUS

    def may_send(self, api_key: int) -> bool:
        return self.authenticated or api_key in PRE_AUTHENTICATION_APIS


@dataclass
class FailedLogins:
    """Clients that keep failing to authenticate are slowed down: each failure from a host waits
    twice as long as the one before it before it is answered (from connection.failed.
    authentication.delay.ms, at most 50 times that); a success resets the host."""
    delay_s: float = 0.1
    failures: dict[str, int] = field(default_factory=dict)

    def failed(self, host: str) -> float:
        """Record a failure; returns the seconds to wait before answering it."""
        count = self.failures[host] = self.failures.get(host, 0) + 1
        return self.delay_s * min(2 ** min(count - 1, 6), 50)

    def succeeded(self, host: str) -> None:
        self.failures.pop(host, None)


# The connection whose request is being handled (each connection is one task).
current: ContextVar[Connection] = ContextVar("connection")


def advertised(config) -> tuple[str, int]:
    """The HOST:PORT Metadata, FindCoordinator and DescribeCluster give: the listener the client came in on."""
    conn = current.get(None)
    return conn.listener.address if conn is not None else config.advertised
