"""One request, one response, over a fresh connection: for tools that need an API no client library
wraps (the CLI's share-group views), with the same codec the broker uses."""
from __future__ import annotations

import io
import socket
import struct

from kafka.protocol.api_header import ResponseHeader

from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey

GROUP_KEY = 0  # FindCoordinator's key type for a group (1 is a transactional id)


def request(bootstrap: str, message, version: int, timeout: float = 30, client_id: str = "headwater-cli"):
    """Send ``message`` at ``version`` to HOST:PORT and return the decoded response body."""
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as sock, sock.makefile("rb") as stream:
        message.API_VERSION = version
        message.with_header(correlation_id=1, client_id=client_id)
        sock.sendall(bytes(message.encode(header=True, framed=True)))
        prefix = stream.read(4)
        frame = stream.read(struct.unpack(">i", prefix)[0]) if len(prefix) == 4 else b""
        if not frame:
            raise ConnectionError(f"{bootstrap} closed the connection without answering")
    response = MESSAGE_CLASSES[message.API_KEY][1]
    # ApiVersions answers with response header v0 at every version (so old clients can read it).
    flexible = response.flexible_version_q(version) and message.API_KEY != ApiKey.API_VERSIONS
    ResponseHeader.decode(io.BytesIO(frame), flexible=flexible)
    return response.decode(frame[4 + flexible:], version=version)


def coordinator(bootstrap: str, group: str, timeout: float = 30) -> str:
    """HOST:PORT of the broker coordinating ``group``: on a cluster, any broker may be it."""
    find = MESSAGE_CLASSES[ApiKey.FIND_COORDINATOR][0](key=group, key_type=GROUP_KEY)
    answer = request(bootstrap, find, 1, timeout)
    if answer.error_code:
        raise ConnectionError(f"no coordinator for group {group!r} (error {answer.error_code})")
    return f"{answer.host}:{answer.port}"
