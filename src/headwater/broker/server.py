"""The broker's network side: one asyncio task per connection, requests answered in order.

Like Kafka, a connection's requests are handled one at a time (a client pipelines them;
responses must come back in the order sent). The answers to requests served in one go (a
client's pipelined produce requests, already buffered) leave together in one write; a lone
request is answered at once. Anything a client sends that cannot be
answered closes that connection with a log line; the broker and its data are untouched.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Protocol

from cryptography import x509

from headwater.broker.apis import ADVERTISED, ENDPOINTS
from headwater.broker.version_apis import api_versions_body
from headwater.broker.produce_apis import ACKS_ALL
from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.endpoint import client_host
from headwater.broker.frames import READ_BUFFER_BYTES, Frames
from headwater.broker.ingest.udp import close_udp_listeners, log_udp_stats, start_udp_listeners
from headwater.broker.log_maintenance import LogMaintenance
from headwater.broker.security import authorization, connection
from headwater.broker.security.connection import Connection, FailedLogins
from headwater.broker.security.listeners import Listener
from headwater.broker.security.sasl import SaslExchange
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, ProtocolError, UnsupportedVersion, encode_response, parse_request

log = logging.getLogger("headwater.broker")
# sasl.server.max.receive.size: the largest frame a connection may send before it authenticates
PRE_AUTHENTICATION_MAX_BYTES = 512 * 1024
# A connection with requests already buffered is served for up to this long before it gives way.
TURN_S = 0.02
# A connection stops reading once its queued whole frames hold this much (what the StreamReader's
# 1 MiB limit allowed before): a client sending faster than it is served holds ~2 MiB and the frame
# being received here. Pausing and resuming costs two epoll_ctl calls and a loop turn, so it must
# not happen within one of librdkafka's largest requests (message.max.bytes, 1,000,000).
READ_PAUSE_BYTES = 2 * 1024 * 1024


class Service(Protocol):
    """Something served beside the Kafka listeners, on the broker's loop: started after them,
    stopped before them. The CLI adds the HTTP console this way, so the broker core knows no HTTP."""
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class Server:
    def __init__(self, broker: Broker, services: Sequence[Callable[[Server], Service]] = (), turn_s: float = TURN_S):
        self.broker, self.turn_s = broker, turn_s
        self._connections: set[asyncio.Task] = set()
        self._bugs_seen: set[tuple[str, str, int]] = set()  # (exception, file, line) already logged in full
        self._servers: list[asyncio.base_events.Server] = []
        cfg = broker.config
        self.failed_logins = FailedLogins(cfg.failed_authentication_delay_ms / 1000)
        self.maintenance = LogMaintenance(broker.log_manager, cfg.retention_check_interval_ms, cfg.cleaner_interval_ms,
                                          cfg.cleaner_io_max_bytes_per_second, moved=broker.wakeups.notify,
                                          stats=broker.stats)
        self.services = [service(self) for service in services]

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def start(self) -> int:
        cfg = self.broker.config
        loop = asyncio.get_running_loop()
        scratch = memoryview(bytearray(READ_BUFFER_BYTES))   # every connection's reads, parsed one at a time

        def connected(frames: Frames, listener: Listener) -> None:
            task = loop.create_task(self._serve(frames, listener))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        for listener in cfg.listeners:
            tls = cfg.tls.server_context(listener.protocol) if listener.protocol.tls else None
            server = await loop.create_server(
                lambda listener=listener: Frames(PRE_AUTHENTICATION_MAX_BYTES if listener.protocol.sasl
                                                 else cfg.socket_request_max_bytes, READ_PAUSE_BYTES, scratch,
                                                 functools.partial(connected, listener=listener)),
                listener.host, listener.port, ssl=tls)
            listener.port = server.sockets[0].getsockname()[1]  # an ephemeral port (0) becomes the real one
            self._servers.append(server)
        port = cfg.port = cfg.listeners[0].port
        self.maintenance.start()
        for service in self.services:
            await service.start()
        return port

    async def stop(self) -> None:
        for service in reversed(self.services):
            await service.stop()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.maintenance.stop()
        self.broker.close()

    async def _serve(self, frames: Frames, listener: Listener) -> None:
        peer = frames.transport.get_extra_info("peername")
        client_host.set(f"/{peer[0]}" if peer else "")
        sasl = SaslExchange(self.broker.credentials, self.broker.config.sasl_mechanisms) \
            if listener.protocol.sasl else None
        conn = Connection(listener, peer[0] if peer else "", sasl, tls_principal(frames.transport))
        connection.current.set(conn)
        access = authorization.Access(self.broker.authorizer, conn, self.broker.config.allow_everyone_if_no_acl_found,
                                      lambda topic_id: getattr(self.broker.log_manager.topic_by_id(topic_id), "name", None))
        answers: list[bytes] = []   # responses not yet written, in request order
        try:
            await self._requests(frames, peer, conn, access, answers)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            self._report_bug(exc, peer)
        finally:
            if answers:   # answered before the connection ends: the transport sends them as it closes
                frames.write(answers)
            frames.transport.close()

    def _report_bug(self, exc: Exception, peer) -> None:
        """A handler failed: a bug. Its traceback is logged the first time only, so one hostile
        client repeating the request cannot flood the log; later ones get one line each."""
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        site = (type(exc).__name__, frame.filename, frame.lineno)
        if site in self._bugs_seen:
            log.error("closing connection from %s after an internal error (%s at %s:%d, traceback logged before)",
                      peer, site[0], frame.filename, frame.lineno)
            return
        self._bugs_seen.add(site)
        log.error("closing connection from %s after an internal error", peer, exc_info=exc)

    async def _requests(self, frames: Frames, peer, conn: Connection, access: authorization.Access,
                        answers: list[bytes]) -> None:
        # Decided once per connection: a connection without SASL is authenticated from its start and
        # stays so; with SASL its exchange is looked at on every request (it may authenticate again).
        sasl = conn.sasl is not None
        quotas, stats, perf_counter = self.broker.quotas, self.broker.stats, time.perf_counter
        turn_started = perf_counter()
        while True:
            if answers and not frames.buffered:
                await _send(frames, answers)   # nothing more to serve at once: answer now
            frame = await frames.read()   # its size within frames.max_size, checked before it was read
            try:
                header, request = parse_request(frame, ADVERTISED)
            except UnsupportedVersion as exc:
                if exc.header.api_key != ApiKey.API_VERSIONS:
                    raise ProtocolError(str(exc)) from exc
                # Unknown ApiVersions version: answer in v0 with the full list so the client can retry.
                body = api_versions_body(ADVERTISED.values(), ErrorCode.UNSUPPORTED_VERSION)
                answers.append(encode_response(exc.header, ADVERTISED[ApiKey.API_VERSIONS], body, 0))
                continue
            if answers and not self._answered_at_once(header, request):
                await _send(frames, answers)   # the answers before it must not wait for its wait
            if sasl and not conn.may_send(header.api_key):
                raise ProtocolError(f"{header.api_name} before SASL authentication")
            endpoint = ENDPOINTS[header.api_key]
            started = perf_counter()
            was_authenticated = not sasl or conn.authenticated
            handle = functools.partial(endpoint.handle, self.broker, header)
            response = await endpoint.authorize(access, header, request, handle)
            if sasl:
                await self._after_sasl(conn, peer, was_authenticated, frames)
            throttle = 0.0
            if response is not None:
                if quotas.configs:   # charged before encoding, so the throttle time goes into the one encoding
                    throttle = quotas.throttle(header.client_id, header.api_key, len(frame),
                                               self._fetched_bytes(header.api_key, response), perf_counter() - started)
                    if throttle and hasattr(response, "throttle_time_ms"):
                        response.throttle_time_ms = int(throttle * 1000)
                answers.append(encode_response(header, endpoint.api, response))
            if sasl and conn.failed:
                return  # as Kafka: the failure is answered, then the connection closed
            # one clock read for the request's time and the turn's
            now = perf_counter()
            stats.request(header.api_key, now - started)
            # Over its quota, the connection is muted for the throttle time, as Kafka does. Else a client
            # with requests already buffered would never yield the loop (reading them does not wait):
            # one busy producer must not starve the fetches waiting to deliver its records. It gives way
            # once its turn is spent, not after each request: librdkafka sends a produce request per
            # partition, and a fetch woken between each two of them answers every partition it names
            # each time (the producer then falls behind, and each wide fetch carries one record).
            if throttle or now - turn_started >= self.turn_s:
                if answers:
                    await _send(frames, answers)
                await asyncio.sleep(throttle)
                turn_started = perf_counter()

    async def _after_sasl(self, conn: Connection, peer, was_authenticated: bool, frames: Frames) -> None:
        """After a request on a SASL connection: a failed exchange is answered late (``_refuse``); a
        successful one resets its host's failures and lifts the frame size limit."""
        if conn.failed:
            await self._refuse(conn, peer)
        elif conn.authenticated and not was_authenticated:
            self.failed_logins.succeeded(conn.peer)
            log.info("%s authenticated %r with %s", peer, conn.principal, conn.sasl.mechanism)
            # The next frames may be as large as any. One read ahead while this was served was held to
            # 512 KiB (Kafka reads the next size only after; no client sends before the answer).
            frames.max_size = self.broker.config.socket_request_max_bytes

    def _answered_at_once(self, header, request) -> bool:
        """Whether a request's handler returns without a wait worth sending the answers before it
        first: a Produce, unless it waits for an fsync round (acks=all under --flush always). Any
        other API may long-poll. (The validator thread of a large or much-compressed batch, or a
        topic's flush.messages / flush.ms coming due, may still hold them a few milliseconds.)"""
        return header.api_key == ApiKey.PRODUCE and not (request.acks == ACKS_ALL
                                                          and self.broker.appender.fsyncs_each_write)

    @staticmethod
    def _fetched_bytes(api_key: int, response) -> int:
        """The record bytes a fetch response carries, what consumer_byte_rate counts (0 for other
        APIs; asked only while a quota is set: an idle consumer's fetch names thousands of partitions)."""
        if api_key != ApiKey.FETCH:
            return 0
        return sum(len(p.records or b"") for topic in response.responses for p in topic.partitions)

    async def _refuse(self, conn: Connection, peer) -> None:
        delay = self.failed_logins.failed(conn.peer)
        log.warning("authentication failed from %s with %s: %s (answered in %.1f s)",
                    peer, conn.sasl.mechanism, conn.sasl.failure, delay)
        await asyncio.sleep(delay)


async def _send(frames: Frames, answers: list[bytes]) -> None:
    """The responses served in one turn, in order, with one write: a send syscall for them all,
    where librdkafka's one produce request per partition would cost one each."""
    frames.write(answers)
    answers.clear()
    await frames.drain()


def tls_principal(transport: asyncio.BaseTransport) -> str | None:
    """With mTLS, the client certificate's subject (RFC 4514, as Kafka's default principal builder)."""
    tls = transport.get_extra_info("ssl_object")
    der = tls.getpeercert(binary_form=True) if tls is not None else None
    if not der:
        return None
    return "User:" + x509.load_der_x509_certificate(der).subject.rfc4514_string()


async def serve(config: BrokerConfig, ready=None, services: Sequence[Callable[[Server], Service]] = ()) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut down cleanly (logs closed, marker written)."""
    server = Server(Broker(config), services)
    await server.start()
    try:
        udp = await start_udp_listeners(server.broker, config.udp_listeners)
    except BaseException:
        await server.stop()
        raise
    udp_stats = asyncio.create_task(log_udp_stats(udp))
    log.info("listening on %s, data in %s", ", ".join(map(str, config.listeners)), config.data_dir)
    if ready is not None:
        ready(config.listeners)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    udp_stats.cancel()
    close_udp_listeners(udp)
    await server.stop()
