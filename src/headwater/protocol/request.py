"""One request, one response, over a fresh connection: for tools that need an API no client library
wraps (the CLI's share-group views), with the same codec the broker uses.

It connects as the other clients do when given librdkafka's security properties
(``--command-config``): TLS from the standard library's ``ssl``, then SASL PLAIN or
SCRAM-SHA-256/512 (scramp's client) before the request. Properties it cannot honour are
refused in one line (``UnsupportedSecurity``) rather than ignored.
"""
from __future__ import annotations

import io
import socket
import ssl
import struct

from kafka.protocol.api_header import ResponseHeader
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest
from scramp import ScramClient, ScramException

from headwater.protocol.messages import GROUP_KEY, MESSAGE_CLASSES, ApiKey

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
UNDERSTOOD = {"security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password",
              "ssl.ca.location", "ssl.certificate.location", "ssl.key.location", "ssl.key.password",
              "ssl.endpoint.identification.algorithm"}


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
    security = security or {}
    protocol = _protocol(security)
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as raw:
        sock = _tls(security).wrap_socket(raw, server_hostname=host) if protocol.endswith("SSL") else raw
        with sock, sock.makefile("rb") as stream:
            call = _Calls(sock, stream, bootstrap, client_id)
            if protocol.startswith("SASL"):
                _login(call, security)
            return call(message, version)


def _protocol(security: dict[str, str]) -> str:
    unknown = sorted(set(security) - UNDERSTOOD)
    if unknown:
        raise UnsupportedSecurity(f"the one-shot client cannot use {', '.join(unknown)}")
    protocol = security.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise UnsupportedSecurity(f"security.protocol={protocol} is not one of {', '.join(PROTOCOLS)}")
    return protocol


def _tls(security: dict[str, str]) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=security.get("ssl.ca.location"))
    # librdkafka's default (since 2.0) is to check the broker's name; "none" turns that off, as there
    context.check_hostname = security.get("ssl.endpoint.identification.algorithm", "https").lower() != "none"
    if "ssl.certificate.location" in security:
        context.load_cert_chain(security["ssl.certificate.location"], security.get("ssl.key.location"),
                                security.get("ssl.key.password"))
    return context


class _Calls:
    """Requests on one connection, answered in order."""

    def __init__(self, sock, stream, bootstrap: str, client_id: str):
        self.sock, self.stream, self.bootstrap, self.client_id = sock, stream, bootstrap, client_id
        self.correlation_id = 0

    def __call__(self, message, version: int):
        self.correlation_id += 1
        message.API_VERSION = version
        message.with_header(correlation_id=self.correlation_id, client_id=self.client_id)
        self.sock.sendall(bytes(message.encode(header=True, framed=True)))
        prefix = self.stream.read(4)
        frame = self.stream.read(struct.unpack(">i", prefix)[0]) if len(prefix) == 4 else b""
        if not frame:
            raise ConnectionError(f"{self.bootstrap} closed the connection without answering")
        response = MESSAGE_CLASSES[message.API_KEY][1]
        # ApiVersions is answered with response header v0 at every version (KIP-511)
        flexible = response.flexible_version_q(version) and message.API_KEY != ApiKey.API_VERSIONS
        ResponseHeader.decode(io.BytesIO(frame), flexible=flexible)
        return response.decode(frame[4 + flexible:], version=version)


def _login(call: _Calls, security: dict[str, str]) -> None:
    """The SASL exchange (KIP-152: SaslHandshake v1, then SaslAuthenticate v1 frames)."""
    mechanism = security.get("sasl.mechanism", security.get("sasl.mechanisms", "PLAIN")).upper()
    if mechanism not in MECHANISMS:
        raise UnsupportedSecurity(f"sasl.mechanism={mechanism} is not one of {', '.join(MECHANISMS)}")
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
