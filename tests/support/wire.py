"""Talk to a broker at the frame level, with kafka-python's codec: for requests no client sends."""
from __future__ import annotations

import io
import socket
import struct

from kafka.protocol.api_header import ResponseHeader

from headwater.protocol.messages import MESSAGE_CLASSES


class Wire:
    def __init__(self, bootstrap: str, timeout: float = 30):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.correlation_id = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exactly(4))
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            buf += chunk
        return bytes(buf)

    def request(self, message, version: int):
        """Send a kafka-python request object at ``version``; return the decoded response."""
        self.correlation_id += 1
        message.API_VERSION = version
        message.with_header(correlation_id=self.correlation_id, client_id="wire-test")
        self.send_raw(bytes(message.encode(header=True, framed=True)))
        frame = self.recv_frame()
        cls = MESSAGE_CLASSES[message.API_KEY][1]
        flexible = cls.flexible_version_q(version) and cls.__name__ != "ApiVersionsResponse"
        header = ResponseHeader.decode(io.BytesIO(frame), flexible=flexible)
        assert header.correlation_id == self.correlation_id
        return cls.decode(frame[4 + flexible:], version=version)

    def is_closed(self) -> bool:
        """True once the broker has closed this connection."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()

