"""The opt-in HTTP listener: uvicorn serving the console app (and the schema registry) on the
broker's own event loop.

uvicorn's Server runs as one more task of the broker's loop, on a socket we bind ourselves
(so a busy port is an ordinary OSError for the CLI to report); the broker keeps its own
signal handling, and stopping the broker stops the listener first.
"""
from __future__ import annotations

import asyncio
import contextlib
import socket

import uvicorn

from headwater.http.console import Console
from headwater.http.history import History
from headwater.http.login import ConsoleLogin
from headwater.http.metrics import BrokerMetrics
from headwater.broker.clock import LoopClock
from headwater.broker.security.listeners import SecurityProtocol
from headwater.broker.server import Server
from headwater.schemas.registry import Registry
from headwater.schemas.store import SchemasTopic, max_schema_bytes

SHUTDOWN_GRACE_S = 1  # open pages (a live tail) get this long to finish when the broker stops


def listening_socket(host: str, port: int) -> socket.socket:
    """The listener's socket, with Nagle's algorithm off for every connection accepted on it.
    asyncio turns it off only on sockets created with proto IPPROTO_TCP, and create_server's
    have proto 0: uvicorn writes a response's headers and body separately, and the body then
    waited for the client's delayed ACK of the headers, 40 ms a request. Accepted sockets
    inherit TCP_NODELAY from the listening one."""
    sock = socket.create_server((host, port), reuse_port=False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _LoopServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        yield  # SIGTERM and SIGINT belong to the broker, which stops us


class HttpListener:
    def __init__(self, server: Server, host: str, port: int, allow_writes: bool):
        broker = server.broker
        metrics = BrokerMetrics(broker, lambda: server.connections)
        self.history = History(broker)
        secured = any(listener.protocol.sasl for listener in broker.config.listeners)
        login = ConsoleLogin(broker, server.failed_logins) if secured else None
        # The schema registry lives with the listener that serves it: _schemas replayed here.
        clock = LoopClock()
        registry = Registry(SchemasTopic(broker.appender, clock), clock, max_schema_bytes(broker.config.message_max_bytes))
        app = Console(broker, metrics, self.history, allow_writes, login, registry).app()
        # httptools (llhttp, compiled) parses requests in a fraction of h11's time; named, not
        # "auto", so a missing install fails here instead of falling back to h11 unseen.
        config = uvicorn.Config(app, http="httptools", lifespan="off", log_level="warning", access_log=False,
                                timeout_graceful_shutdown=SHUTDOWN_GRACE_S)
        config.load()
        if broker.config.http_tls:
            # The Kafka listeners' TLS (1.2 at least, the same certificate); users log in, as over
            # SASL_SSL, so no client certificate is asked for.
            config.ssl = broker.config.tls.server_context(SecurityProtocol.SASL_SSL)
        self._uvicorn = _LoopServer(config)
        self._socket = listening_socket(host, port)
        self._task: asyncio.Task | None = None

    @property
    def address(self) -> tuple[str, int]:
        return self._socket.getsockname()[:2]

    async def start(self) -> None:
        self.history.start()
        self._task = asyncio.create_task(self._uvicorn.serve(sockets=[self._socket]))
        while not self._uvicorn.started and not self._task.done():
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()  # startup failed: raise why

    async def stop(self) -> None:
        self._uvicorn.should_exit = True
        if self._task is not None:
            await self._task
        await self.history.stop()
        self._socket.close()
