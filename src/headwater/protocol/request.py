"""Kafka requests from Python over the broker's own codec, for what no client library wraps:
one request over a fresh connection (the CLI's share-group views), or a kept connection
(the Spark source's fetches, whose record batches it reads as bytes).

It connects as the other clients do when given librdkafka's security properties
(``--command-config``): TLS from the standard library's ``ssl``, then SASL PLAIN or
SCRAM-SHA-256/512 (scramp's client) before the first request. Properties it cannot honour
are refused in one line (``UnsupportedSecurity``) rather than ignored.
"""
from __future__ import annotations

import io
import socket
import ssl
import struct
from collections import deque

from kafka.protocol.api_header import ResponseHeader
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from scramp import ScramClient, ScramException

from headwater.protocol.messages import GROUP_KEY, MESSAGE_CLASSES, ApiKey

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
UNDERSTOOD = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
              "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
              "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification"}


class UnsupportedSecurity(Exception):
    """Security properties this client cannot honour."""


class AuthenticationFailed(Exception):
    """The broker refused the SASL login."""


class NoCoordinator(Exception):
    """FindCoordinator answered an error."""


def request(bootstrap: str, message, version: int, timeout: float = 30, client_id: str = "headwater-cli",
            security: dict[str, str] | None = None):
    """Send ``message`` at ``version`` to HOST:PORT and return the decoded response body.
    ``security``: librdkafka properties (security.protocol, sasl.*, ssl.*) for a secured listener."""
    with Connection(bootstrap, timeout, client_id, security) as connection:
        return connection(message, version)


def security_properties(config: dict[str, str]) -> dict[str, str]:
    """The security properties among a client's librdkafka settings, checked: what this
    module cannot honour raises UnsupportedSecurity."""
    security = {k: v for k, v in config.items() if k in UNDERSTOOD or k.split(".", 1)[0] in ("security", "sasl", "ssl")}
    _protocol(security)
    return security


def _protocol(security: dict[str, str]) -> str:
    unknown = sorted(set(security) - UNDERSTOOD)
    if unknown:
        raise UnsupportedSecurity(f"the one-shot client cannot use {', '.join(unknown)}")
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UnsupportedSecurity(f"security.protocol={protocol} is not one of {', '.join(PROTOCOLS)}")
    if protocol.startswith("SASL") and _mechanism(security) not in MECHANISMS:
        raise UnsupportedSecurity(f"sasl.mechanism={_mechanism(security)} is not one of {', '.join(MECHANISMS)}")
    return protocol


def _mechanism(security: dict[str, str]) -> str:
    return security.get("sasl.mechanism", security.get("sasl.mechanisms", "PLAIN")).upper()


def _tls(security: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=security.get("ssl.ca.location"))
    # librdkafka's default (since 2.0) is to check the broker's name; "none" turns that off, as there
    context.check_hostname = security.get("ssl.endpoint.identification.algorithm", "https").lower() != "none"
    if security.get("enable.ssl.certificate.verification", "true").lower() == "false":
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if "ssl.certificate.location" in security:
        context.load_cert_chain(security["ssl.certificate.location"], security.get("ssl.key.location"),
                                security.get("ssl.key.password"))
    return context


class Connection:
    """One connection, logged in if the listener asks for it; requests on it are answered
    in order."""

    def __init__(self, address: str, timeout: float = 30, client_id: str = "headwater-cli",
                 security: dict[str, str] | None = None):
        security = security or {}
        protocol = _protocol(security)
        host, port = address.rsplit(":", 1)
        self.address, self.client_id = address, client_id
        self.correlation_id = 0
        self.unanswered: deque[int] = deque()  # correlation ids sent, in order
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        try:
            if protocol.endswith("SSL"):
                self.sock = _tls(security).wrap_socket(self.sock, server_hostname=host)
            self.stream = self.sock.makefile("rb")
            if protocol.startswith("SASL"):
                _login(self, security)
        except BaseException:
            self.sock.close()
            raise

    def close(self) -> None:
        self.stream.close()
        self.sock.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __call__(self, message, version: int):
        self.send(message, version)
        return self.receive(message.API_KEY, version)

    def send(self, message, version: int) -> None:
        """Send a request without waiting: `receive` reads the answers in the same order."""
        self.correlation_id += 1
        message.API_VERSION = version
        message.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(bytes(message.encode(header=True, framed=True)))
        self.unanswered.append(self.correlation_id)

    def receive(self, api_key: int, version: int):
        prefix = self.stream.read(4)
        size = struct.unpack(">i", prefix)[0] if len(prefix) == 4 else 0
        frame = self.stream.read(size) if size > 0 else b""
        if not frame or len(frame) < size:
            raise ConnectionError(f"{self.address} closed the connection without a whole answer")
        response = MESSAGE_CLASSES[api_key][1]
        # ApiVersions is answered with response header v0 at every version (KIP-511)
        flexible = response.flexible_version_q(version) and api_key != ApiKey.API_VERSIONS
        header = ResponseHeader.decode(io.BytesIO(frame), flexible=flexible)
        expected = self.unanswered.popleft() if self.unanswered else None
        if header.correlation_id != expected:
            raise ConnectionError(f"{self.address} answered request {header.correlation_id}, "
                                  f"expected {expected}")
        return response.decode(frame[4 + flexible:], version=version)


def _login(call: Connection, security: dict[str, str]) -> None:
    """The SASL exchange (KIP-152: SaslHandshake v1, then SaslAuthenticate v1 frames)."""
    mechanism = _mechanism(security)  # one of MECHANISMS: _protocol checked it
    user, password = security.get("sasl.username", ""), security.get("sasl.password", "")
    handshake = call(SaslHandshakeRequest(mechanism=mechanism), 1)
    if handshake.error_code:
        raise AuthenticationFailed(f"the broker does not offer {mechanism} (it offers "
                                   f"{', '.join(handshake.mechanisms) or 'none'})")

    def authenticate(token: bytes) -> bytes:
        answer = call(SaslAuthenticateRequest(auth_bytes=token), 1)
        if answer.error_code:
            raise AuthenticationFailed(answer.error_message or f"SASL error {answer.error_code}")
        return answer.auth_bytes
    if mechanism == "PLAIN":
        authenticate(b"\0" + user.encode() + b"\0" + password.encode())
        return
    scram = ScramClient([mechanism], user, password)
    scram.set_server_first(authenticate(scram.get_client_first().encode()).decode())
    try:
        scram.set_server_final(authenticate(scram.get_client_final().encode()).decode())
    except ScramException as exc:  # the broker could not prove it knows the password
        raise AuthenticationFailed(f"the broker's SCRAM signature is wrong: {exc}") from None


def coordinator(bootstrap: str, group: str, timeout: float = 30, security: dict[str, str] | None = None) -> str:
    """HOST:PORT of the broker coordinating ``group``: on a cluster, any broker may be it."""
    find = MESSAGE_CLASSES[ApiKey.FIND_COORDINATOR][0](key=group, key_type=GROUP_KEY)
    answer = request(bootstrap, find, 1, timeout, security=security)
    if answer.error_code:
        raise NoCoordinator(f"no coordinator for group {group!r} (error {answer.error_code})")
    return f"{answer.host}:{answer.port}"
