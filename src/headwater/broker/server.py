"""The broker's network side: one asyncio task per connection, requests answered in order.

Like Kafka, a connection's requests are handled one at a time (a client pipelines them;
responses must come back in the order sent). Anything a client sends that cannot be
answered closes that connection with a log line; the broker and its data are untouched.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import struct
import time
import traceback

from headwater.broker.apis import ADVERTISED, ENDPOINTS
from headwater.broker.apis.api_versions import api_versions_body
from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.endpoint import client_host
from headwater.broker.ingest.udp import close_udp_listeners, log_udp_stats, start_udp_listeners
from headwater.broker.http.listener import HttpListener
from headwater.broker.log_maintenance import LogMaintenance
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, ProtocolError, UnsupportedVersion, encode_response, parse_request

log = logging.getLogger("headwater.broker")
_SIZE = struct.Struct(">i")


class Server:
    def __init__(self, broker: Broker):
        self.broker = broker
        self._connections: set[asyncio.Task] = set()
        self._bugs_seen: set[tuple[str, str, int]] = set()  # (exception, file, line) already logged in full
        self._server: asyncio.base_events.Server | None = None
        cfg = broker.config
        self.maintenance = LogMaintenance(broker.log_manager, cfg.retention_check_interval_ms, cfg.cleaner_interval_ms)
        self.http: HttpListener | None = None
        if cfg.http_listener is not None:
            self.http = HttpListener(self, *cfg.http_listener, allow_writes=cfg.console_allow_writes)

    @property
    def connections(self) -> int:
        return len(self._connections)

    async def start(self) -> int:
        cfg = self.broker.config
        self._server = await asyncio.start_server(self._serve, cfg.host, cfg.port)
        port = self._server.sockets[0].getsockname()[1]
        cfg.port = port  # an ephemeral port (0) becomes the real one, which Metadata advertises
        self.maintenance.start()
        if self.http is not None:
            await self.http.start()
        return port

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.stop()
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.maintenance.stop()
        self.broker.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host.set(f"/{peer[0]}" if peer else "")
        try:
            await self._requests(reader, writer, peer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except asyncio.CancelledError:
            pass
        except Exception as exc:
            self._report_bug(exc, peer)
        finally:
            self._connections.discard(task)
            writer.close()

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

    async def _requests(self, reader, writer, peer) -> None:
        limit = self.broker.config.socket_request_max_bytes
        while True:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
            if size < 0 or size > limit:
                raise ProtocolError(f"request size {size} is outside 0..{limit} (socket.request.max.bytes)")
            frame = await reader.readexactly(size)
            try:
                header, request = parse_request(frame, ADVERTISED)
            except UnsupportedVersion as exc:
                if exc.header.api_key != ApiKey.API_VERSIONS:
                    raise ProtocolError(str(exc)) from exc
                # Unknown ApiVersions version: answer in v0 with the full list so the client can retry.
                body = api_versions_body(ADVERTISED.values(), ErrorCode.UNSUPPORTED_VERSION)
                writer.write(encode_response(exc.header, ADVERTISED[ApiKey.API_VERSIONS], body, 0))
                await writer.drain()
                continue
            endpoint = ENDPOINTS[header.api_key]
            started = time.perf_counter()
            response = await endpoint.handle(self.broker, header, request)
            throttle = 0.0
            if response is not None:
                encoded = encode_response(header, endpoint.api, response)
                throttle = self.broker.quotas.throttle(header.client_id, header.api_key, size, len(encoded),
                                                       time.perf_counter() - started)
                if throttle and hasattr(response, "throttle_time_ms"):
                    response.throttle_time_ms = int(throttle * 1000)
                    encoded = encode_response(header, endpoint.api, response)
                writer.write(encoded)
                await writer.drain()
            if self.broker.metrics is not None:
                self.broker.metrics.request(header.api_key, time.perf_counter() - started)
            # Over its quota, the connection is muted for the throttle time, as Kafka does. Else a client
            # with requests already buffered would never yield the loop: one busy producer must not
            # starve the fetches waiting to deliver its records.
            await asyncio.sleep(throttle)


async def serve(config: BrokerConfig, ready=None) -> None:
    """Run a broker until SIGTERM or SIGINT, then shut down cleanly (logs closed, marker written)."""
    server = Server(Broker(config))
    port = await server.start()
    try:
        udp = await start_udp_listeners(server.broker, config.udp_listeners)
    except BaseException:
        await server.stop()
        raise
    if server.broker.metrics is not None:
        server.broker.metrics.watch_udp(udp)
    udp_stats = asyncio.create_task(log_udp_stats(udp))
    log.info("listening on %s:%d, data in %s", config.host, port, config.data_dir)
    if ready is not None:
        ready(port, server.http.address if server.http else None)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down")
    udp_stats.cancel()
    close_udp_listeners(udp)
    await server.stop()
