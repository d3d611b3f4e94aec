"""A TCP proxy in front of the broker that loses the first Produce response, as a network
failure after the broker appended would: the client must retry a batch the log already has."""
from __future__ import annotations

import socket
import struct
import threading


class ResponseLosingProxy:
    PRODUCE = 0

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.target: tuple[str, int] | None = None
        self.lost = 0
        self._lock = threading.Lock()

    def start(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            api_of: dict[int, int] = {}
            threading.Thread(target=self._pump, args=(client, upstream, api_of, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, api_of, False), daemon=True).start()

    def _pump(self, src, dst, api_of, from_client) -> None:
        try:
            while True:
                head = _recv(src, 4)
                frame = _recv(src, struct.unpack(">i", head)[0])
                if from_client:
                    api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
                    api_of[correlation_id] = api_key
                else:
                    (correlation_id,) = struct.unpack_from(">i", frame)
                    with self._lock:
                        lose = api_of.get(correlation_id) == self.PRODUCE and self.lost == 0
                        self.lost += lose
                    if lose:  # the broker appended; the client never hears of it
                        break
                dst.sendall(head + frame)
        except (OSError, struct.error):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.listener.close()


def _recv(sock, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise OSError("closed")
        buf += chunk
    return bytes(buf)
