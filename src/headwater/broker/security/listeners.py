"""Listeners, as Kafka's ``listeners`` setting names them: ``PROTOCOL://HOST:PORT``.

Each listener has a security protocol: PLAINTEXT (no TLS, no authentication), SSL (TLS,
optionally with client certificates: mTLS), SASL_PLAINTEXT and SASL_SSL (a SASL exchange
before anything else, without or within TLS).
"""
from __future__ import annotations

import ssl
from dataclasses import dataclass
from enum import Enum
from pathlib import Path


class SecurityProtocol(str, Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass
class Listener:
    protocol: SecurityProtocol
    host: str
    port: int  # 0 until the server binds it to a free port
    advertised: tuple[str, int] | None = None  # advertised.listeners, when clients come through a proxy or NAT

    @classmethod
    def parse(cls, text: str) -> Listener:
        """``SASL_SSL://127.0.0.1:9093`` (a bare ``HOST:PORT`` is PLAINTEXT)."""
        scheme, sep, address = text.partition("://")
        if not sep:
            scheme, address = "PLAINTEXT", text
        try:
            protocol = SecurityProtocol(scheme.upper())
        except ValueError:
            raise ValueError(f"unknown security protocol {scheme!r}: one of "
                             f"{', '.join(p.value for p in SecurityProtocol)}") from None
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"expected PROTOCOL://HOST:PORT, got {text!r}")
        return cls(protocol, host.strip("[]"), int(port))

    @property
    def address(self) -> tuple[str, int]:
        """The HOST:PORT Metadata gives clients that came in on this listener."""
        return self.advertised or (self.host, self.port)

    def __str__(self) -> str:
        return f"{self.protocol.value}://{self.host}:{self.port}"


@dataclass(frozen=True)
class TlsSettings:
    """Kafka's ssl.keystore (cert + key), ssl.truststore (CA of client certificates), ssl.client.auth."""
    certfile: Path
    keyfile: Path
    cafile: Path | None = None
    client_auth: str = "none"  # none | requested | required

    def server_context(self, protocol: SecurityProtocol) -> ssl.SSLContext:
        """As Kafka, ssl.client.auth applies to SSL listeners; SASL_SSL ones authenticate with SASL."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.certfile, self.keyfile)
        if self.cafile is not None:
            context.load_verify_locations(self.cafile)
        context.verify_mode = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL,
                               "required": ssl.CERT_REQUIRED}[self.client_auth if protocol is SecurityProtocol.SSL
                                                                 else "none"]
        return context
