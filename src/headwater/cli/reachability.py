"""Before a one-shot command talks to the broker: is anyone there, within one timeout, and
does the port speak what the client will?

Every one-shot command (topics, groups, transactions, quotas, ...) goes through `require_broker`
first, so a broker that is down gets one message naming the address, at once for a closed
port and after CONNECT_TIMEOUT for one that never answers, whichever client library the
command then uses. A plaintext client at a TLS or SASL listener is told so, with what to
pass: that port answers a plain ApiVersions with TLS bytes or not at all (TLS), or answers
it and then closes on Metadata, the only requests a SASL listener takes before a login.
"""
from __future__ import annotations

import socket

from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest

from headwater.cli.common import CommandError
from headwater.protocol.request import Connection

CONNECT_TIMEOUT = 10.0  # seconds; librdkafka's socket.connection.setup.timeout.ms in --command-config overrides it
TLS_HINT = ("this looks like a TLS listener: pass --command-config FILE with security.protocol=SSL "
            "(or SASL_SSL) and ssl.ca.location=...")
SASL_HINT = ("this looks like a SASL listener (it wants a login first): pass --command-config FILE with "
             "security.protocol=SASL_PLAINTEXT (or SASL_SSL), sasl.mechanism, sasl.username and sasl.password")


class ListenerMismatch(Exception):
    """The port answers, but not in the protocol the client is configured for."""


def require_broker(bootstrap: str, properties: dict[str, str]) -> None:
    """Return if a broker answers at one of the `bootstrap` addresses; else a CommandError saying why."""
    timeout = float(properties.get("socket.connection.setup.timeout.ms", CONNECT_TIMEOUT * 1000)) / 1000
    plaintext = properties.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT"
    failures = []
    for address in (a.strip() for a in bootstrap.split(",") if a.strip()):
        try:
            (_speaks_kafka if plaintext else _accepts)(address, timeout)
            return
        except ListenerMismatch as exc:
            raise CommandError(f"{address} answers, but {exc}") from None
        except (socket.timeout, TimeoutError):
            failures.append(f"{address}: no answer within {timeout:g} s")
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise CommandError(f"cannot reach a broker at {bootstrap} ({'; '.join(failures)})")


def _accepts(address: str, timeout: float) -> None:
    """A secured client: that the port takes connections; the client's own login says the rest."""
    host, _, port = address.rpartition(":")
    socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()


def _speaks_kafka(address: str, timeout: float) -> None:
    with Connection(address, timeout) as connection:
        try:
            connection(ApiVersionsRequest(), 0)
        except (ConnectionError, ValueError, EOFError, KeyError):  # TLS bytes do not decode
            raise ListenerMismatch(TLS_HINT) from None
        try:
            connection(MetadataRequest(topics=[]), 1)
        except ConnectionError:
            raise ListenerMismatch(SASL_HINT) from None
