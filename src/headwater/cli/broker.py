"""`headwater broker`: run a broker on a data directory."""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import ssl
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headwater.broker.broker import DataDirInUse
from headwater.broker.config import BrokerConfig
from headwater.broker.security.listeners import Listener, TlsSettings
from headwater.broker.security.sasl import ALL_MECHANISMS
from headwater.broker.ingest.udp import NoSuchTopic, UdpListenerConfig
from headwater.broker.server import Server, serve
from headwater.cli.common import CommandError, data_dir, name_value, non_negative_int, positive_float, positive_int
from headwater.cli.ready_lines import BROKER_READY, CONSOLE_READY, LISTENER_READY
from headwater.log import LogConfig
from headwater.log.layout import CorruptFile
from headwater.records.layout import MESSAGE_MAX_BYTES

if TYPE_CHECKING:   # imported by the broker that serves the console only: ~0.2 s of each start
    from headwater.http.listener import HttpListener


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(text)
    return port


def _listener(text: str) -> str:
    host, _, port = text.rpartition(":")
    if not host:
        raise ValueError(text)
    _port(port)
    return text


def _address(text: str) -> tuple[str, int]:
    host, _, port = _listener(text).rpartition(":")
    return host, int(port)


def _http_listener(text: str) -> tuple[bool, tuple[str, int]]:
    """[http://|https://]HOST:PORT: (HTTPS?, address)."""
    scheme, separator, address = text.partition("://")
    if not separator:
        scheme, address = "http", text
    if scheme not in ("http", "https"):
        raise ValueError(text)
    return scheme == "https", _address(address)


def _expecting(parse: Callable[[str], Any], form: str) -> Callable[[str], Any]:
    """``parse`` as an argparse type: its ValueError becomes "expected FORM, got TEXT"."""
    def argument(text: str):
        try:
            return parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {form}, got {text!r}") from None
    return argument


def _udp(address: str, topic: str, mode: str) -> UdpListenerConfig:
    try:
        host, port = _address(address)
    except ValueError:
        raise CommandError(f"--{'statsd' if mode == 'statsd' else 'udp'}-listener: expected HOST:PORT, "
                           f"got {address!r}") from None
    return UdpListenerConfig(host, port, topic, mode)


def _topic_config(text: str) -> tuple[str, str]:
    name, value = name_value(text)
    try:
        LogConfig.from_topic_configs({name: value}, LogConfig())
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return name, value


def _mechanisms(text: str) -> tuple[str, ...]:
    names = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    unknown = set(names) - set(ALL_MECHANISMS)
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown SASL mechanism(s) {sorted(unknown)}: one of {', '.join(ALL_MECHANISMS)}")
    return names


def _security_listener(text: str) -> Listener:
    try:
        return Listener.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("broker", help="run a Kafka-compatible broker")
    p.add_argument("--data-dir", required=True, type=data_dir, help="where the logs live")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    p.add_argument("--port", default=9092, type=_expecting(_port, "a port from 0 to 65535"),
                   help="port, 0 for any free one (default %(default)s)")
    p.add_argument("--advertised-listener", type=_expecting(_listener, "HOST:PORT"), metavar="HOST:PORT",
                   help="address given to clients in Metadata, when they reach the broker through a proxy or NAT")
    p.add_argument("--listener", action="append", default=[], type=_security_listener,
                   metavar="PROTOCOL://HOST:PORT",
                   help="a listener with its security protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL "
                        "(repeatable; replaces --host/--port)")
    p.add_argument("--ssl-certfile", type=Path, help="the broker's certificate (PEM), for SSL and SASL_SSL listeners")
    p.add_argument("--ssl-keyfile", type=Path, help="the certificate's private key (PEM)")
    p.add_argument("--ssl-cafile", type=Path, help="CA certificates that client certificates are checked against")
    p.add_argument("--ssl-client-auth", choices=("none", "requested", "required"), default="none",
                   help="ask clients for a certificate (mTLS; principal = its subject); default %(default)s")
    p.add_argument("--sasl-mechanisms", type=_mechanisms, default=ALL_MECHANISMS, metavar="M1,M2",
                   help="sasl.enabled.mechanisms (default %(default)s)")
    p.add_argument("--super-user", action="append", default=[], metavar="User:NAME",
                   help="super.users: a principal every ACL check lets through (repeatable)")
    p.add_argument("--allow-everyone-if-no-acl-found", action="store_true",
                   help="on secured listeners, allow what no ACL names (PLAINTEXT listeners always do)")
    p.add_argument("--failed-authentication-delay-ms", type=non_negative_int, default=100,
                   help="wait before answering a failed authentication, doubled for each further failure "
                        "from the same host (default %(default)s)")
    p.add_argument("--num-partitions", default=1, type=positive_int, help="partitions of auto-created topics")
    p.add_argument("--max-partitions", default=10000, type=positive_int,
                   help="partitions the broker holds over all topics (default %(default)s)")
    p.add_argument("--max-partitions-per-request", default=1000, type=positive_int,
                   help="partitions one CreateTopics may ask for (default %(default)s)")
    p.add_argument("--no-auto-create", action="store_true", help="refuse produce/metadata for unknown topics")
    p.add_argument("--flush", choices=("always", "never"), default="always",
                   help="always: fsync before acknowledging an acks=all produce (default)")
    p.add_argument("--message-max-bytes", default=MESSAGE_MAX_BYTES, type=positive_int,
                   help="largest batch a produce may carry")
    p.add_argument("--log-config", action="append", default=[], type=_topic_config, metavar="NAME=VALUE",
                   help="broker default of a topic config, e.g. retention.ms=3600000 (repeatable)")
    p.add_argument("--retention-check-interval-ms", default=300000, type=positive_int,
                   help="how often retention deletes old segments (default %(default)s)")
    p.add_argument("--log-flush-offset-checkpoint-interval-ms", default=60000, type=non_negative_int, metavar="MS",
                   help="log.flush.offset.checkpoint.interval.ms: how often each log's recovery point is written; a "
                        "crash validates the batches after it again (default %(default)s)")
    p.add_argument("--cleaner-interval-ms", default=15000, type=positive_int,
                   help="pause between log cleaner passes over compacted topics (default %(default)s)")
    p.add_argument("--cleaner-io-max-bytes-per-second", type=positive_float, metavar="BYTES",
                   help="log.cleaner.io.max.bytes.per.second: the cleaner's reads and writes, at most (default: "
                        "unthrottled)")
    p.add_argument("--group-initial-rebalance-delay-ms", default=3000, type=non_negative_int, metavar="MS",
                   help="group.initial.rebalance.delay.ms: a new consumer group's first rebalance waits this long for "
                        "more members, longer while they keep joining (default %(default)s)")
    p.add_argument("--max-incremental-fetch-session-cache-slots", default=1000, type=non_negative_int, metavar="N",
                   help="fetch sessions (KIP-227) kept; the least used give way, 0 turns them off (default %(default)s)")
    p.add_argument("--group-consumer-session-timeout-ms", default=45000, type=positive_int, metavar="MS",
                   help="group.consumer.session.timeout.ms: a consumer-protocol (KIP-848) member that does not "
                        "heartbeat for this long is fenced (default %(default)s)")
    p.add_argument("--group-consumer-heartbeat-interval-ms", default=5000, type=positive_int, metavar="MS",
                   help="group.consumer.heartbeat.interval.ms: how often consumer-protocol members heartbeat "
                        "(default %(default)s)")
    p.add_argument("--group-consumer-max-size", type=positive_int, metavar="N",
                   help="group.consumer.max.size: members a consumer-protocol group may have; more get "
                        "GROUP_MAX_SIZE_REACHED (default: no limit)")
    p.add_argument("--http-listener", type=_expecting(_http_listener, "[http://|https://]HOST:PORT"),
                   metavar="[https://]HOST:PORT",
                   help="serve Prometheus /metrics and the web console here (port 0: any free one); https:// serves "
                        "them over TLS with --ssl-certfile and --ssl-keyfile; off by default")
    p.add_argument("--console-allow-writes", action="store_true",
                   help="let the web console change state (reset a group's offsets); read-only by default")
    p.add_argument("--statsd-listener", nargs=2, action="append", default=[], metavar=("HOST:PORT", "TOPIC"),
                   help="receive StatsD metrics over UDP, one JSON record per metric keyed by its name (repeatable)")
    p.add_argument("--udp-listener", nargs=2, action="append", default=[], metavar=("HOST:PORT", "TOPIC"),
                   help="receive raw UDP datagrams, one record each (repeatable)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run)


GC_THRESHOLDS = (20_000, 10, 10)   # gc.set_threshold: young, middle, old generations


def run(args) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = _config(args)
    except ValueError as exc:
        raise CommandError(str(exc)) from exc

    consoles: list[HttpListener] = []  # the one --http-listener asks for, once the server has built it

    def console(server: Server) -> HttpListener:
        from headwater.http.listener import HttpListener
        consoles.append(HttpListener(server, *config.http_listener, allow_writes=config.console_allow_writes))
        return consoles[-1]

    def ready(listeners: list[Listener]) -> None:
        print(f"{BROKER_READY}{listeners[0].host}:{listeners[0].port}", flush=True)
        for listener in listeners if args.listener else ():
            print(f"{LISTENER_READY}{listener}", flush=True)
        for http in consoles:
            host, port = http.address
            print(f"{CONSOLE_READY}{'https' if config.http_tls else 'http'}://{host}:{port}/", flush=True)

    # CPython collects its youngest generation every 700 new container objects; a broker's requests
    # make thousands (a fetch on 2,000 partitions: futures, tuples, response objects), and each
    # collection cascades into the older ones over the broker's large, long-lived heap: about a
    # third of an idle consumer's cost (bench/idle_consumer.py). Cycles are still collected.
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        asyncio.run(serve(config, ready, [console] if config.http_listener is not None else []))
    except ssl.SSLError as exc:
        raise CommandError(f"cannot load the TLS files (certificate {args.ssl_certfile}, key {args.ssl_keyfile}, "
                           f"CA {args.ssl_cafile}): {exc}") from exc
    except (DataDirInUse, NoSuchTopic, CorruptFile) as exc:
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        where = ", ".join(f"{listener.host}:{listener.port}" for listener in config.listeners)
        raise CommandError(f"cannot serve on {where} with data in {args.data_dir}: {exc}") from exc
    return 0


def _tls(args) -> TlsSettings | None:
    if args.ssl_certfile is None and args.ssl_keyfile is None:
        return None
    if args.ssl_certfile is None or args.ssl_keyfile is None:
        raise CommandError("--ssl-certfile and --ssl-keyfile go together")
    for path in (args.ssl_certfile, args.ssl_keyfile, args.ssl_cafile):
        if path is not None and not path.is_file():
            raise CommandError(f"no such certificate or key file: {path}")
    return TlsSettings(args.ssl_certfile, args.ssl_keyfile, args.ssl_cafile, args.ssl_client_auth)


def _config(args) -> BrokerConfig:
    return BrokerConfig(data_dir=args.data_dir, host=args.host, port=args.port,
                        advertised_listener=args.advertised_listener, num_partitions=args.num_partitions,
                        max_partitions=args.max_partitions,
                        max_partitions_per_request=args.max_partitions_per_request,
                        auto_create_topics=not args.no_auto_create, flush=args.flush,
                        message_max_bytes=args.message_max_bytes, topic_defaults=dict(args.log_config),
                        retention_check_interval_ms=args.retention_check_interval_ms,
                        flush_offset_checkpoint_interval_ms=args.log_flush_offset_checkpoint_interval_ms,
                        cleaner_interval_ms=args.cleaner_interval_ms,
                        cleaner_io_max_bytes_per_second=args.cleaner_io_max_bytes_per_second,
                        http_listener=args.http_listener[1] if args.http_listener else None,
                        http_tls=bool(args.http_listener and args.http_listener[0]),
                        fetch_session_cache_slots=args.max_incremental_fetch_session_cache_slots,
                        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
                        group_consumer_session_timeout_ms=args.group_consumer_session_timeout_ms,
                        group_consumer_heartbeat_interval_ms=args.group_consumer_heartbeat_interval_ms,
                        group_consumer_max_size=args.group_consumer_max_size,
                        console_allow_writes=args.console_allow_writes, listeners=args.listener,
                        tls=_tls(args), sasl_mechanisms=args.sasl_mechanisms,
                        failed_authentication_delay_ms=args.failed_authentication_delay_ms,
                        super_users=frozenset(args.super_user),
                        allow_everyone_if_no_acl_found=args.allow_everyone_if_no_acl_found,
                        udp_listeners=[_udp(address, topic, "statsd") for address, topic in args.statsd_listener]
                        + [_udp(address, topic, "raw") for address, topic in args.udp_listener])
