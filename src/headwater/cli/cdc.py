"""`headwater cdc postgres|sqlite`: run a change data capture connector with a status line."""
from __future__ import annotations

import argparse
import gc
import os
import sqlite3
import sys
import time
from typing import Callable

import psycopg2
from confluent_kafka import KafkaException

from headwater.cdc import CdcError, SourceUnavailable
from headwater.cdc.connector import Connector
from headwater.cdc.shipper import DeliveryFailed
from headwater.cli.common import add_connection_args, add_schema_registry_arg, registry_config
from headwater.cli.long_running import StopRequest, command_log
from headwater.waiting import Stopped

# Failures that pass: the broker or the database went away for a while.
TRANSIENT = (psycopg2.OperationalError, psycopg2.InterfaceError, sqlite3.OperationalError, KafkaException,
             DeliveryFailed)


def add_parser(subparsers) -> None:
    cdc = subparsers.add_parser("cdc", help="capture database changes into topics (Debezium-shaped events)")
    sources = cdc.add_subparsers(dest="cdc_source", required=True)

    pg = sources.add_parser("postgres", help="PostgreSQL via logical decoding (pgoutput)")
    pg.add_argument("--dsn", required=True, help="libpq connection string of the source database")
    _common(pg, prefix_required=True)
    pg.add_argument("--slot", default="headwater", help="replication slot name (default: %(default)s)")
    pg.add_argument("--publication", default="headwater", help="publication name (default: %(default)s)")
    pg.add_argument("--snapshot-mode", choices=("initial", "never", "when_needed"), default="initial",
                    help="initial: snapshot on first start; when_needed: also when the slot is gone; never")
    pg.add_argument("--heartbeat-interval", type=float, default=5.0,
                    help="seconds between position confirmations on an idle stream (default: %(default)s)")
    pg.set_defaults(func=run_postgres, waits_for_broker=True)

    lite = sources.add_parser("sqlite", help="SQLite via triggers and a changelog table")
    lite.add_argument("--db", required=True, help="SQLite database file")
    _common(lite, prefix_required=False)
    action = lite.add_mutually_exclusive_group()
    action.add_argument("--install-triggers", action="store_true", help="install the capture triggers and exit")
    action.add_argument("--remove-triggers", action="store_true", help="remove the capture triggers and exit")
    lite.set_defaults(func=run_sqlite, waits_for_broker=True)


def _common(parser: argparse.ArgumentParser, prefix_required: bool) -> None:
    parser.add_argument("--tables", required=True, help="comma-separated table names")
    parser.add_argument("--topic-prefix", required=prefix_required,
                        help="topics are <prefix>.<schema>.<table>" + ("" if prefix_required else
                                                                       " (default: the database file's name)"))
    add_connection_args(parser)
    parser.add_argument("--positions-topic", default="headwater-cdc-positions",
                        help="topic where the connector keeps its position (default: %(default)s)")
    parser.add_argument("--status-interval", type=float, default=2.0, help="seconds between status lines")
    add_schema_registry_arg(parser, "each table's schema from its columns, registered as <topic>-value and "
                                    "<topic>-key")


def _tables(args: argparse.Namespace) -> list[str]:
    return [t.strip() for t in args.tables.split(",") if t.strip()]


def _registry(args: argparse.Namespace) -> dict:
    return {"schema_registry": args.schema_registry,
            "registry_config": registry_config(args.schema_registry, args.command_config)}


def _status_printer() -> Callable[[str], None]:
    tty = sys.stderr.isatty()

    def show(line: str) -> None:
        sys.stderr.write(("\r" + line + "\033[K") if tty else line + "\n")
        sys.stderr.flush()
    return show


GC_THRESHOLDS = (20_000, 50, 100)   # gc.set_threshold: young, middle, old generations


def _supervise(make_connector: Callable[[], Connector], args: argparse.Namespace, log: Callable[[str], None]) -> int:
    """Run until SIGINT/SIGTERM (exit 130/143 once what was sent is acknowledged). Failures
    that pass (broker or database gone for a while) restart the connector, which resumes from
    its last acknowledged position. A source that cannot be reached at the very first start
    is a configuration error instead."""
    stopping = StopRequest()
    # Each event leaves a few short-lived objects behind and no cycles: young-generation
    # collections every 700 allocations only cost time (~4% of a busy connector's CPU).
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    has_run = False
    while not stopping():
        try:
            make_connector().run(should_stop=stopping, status_interval=args.status_interval,
                                 on_status=_status_printer())
        except Stopped:
            break
        except CdcError as exc:
            if not (has_run and isinstance(exc, SourceUnavailable)):
                print(f"headwater: error: {exc}", file=sys.stderr)
                return 1
            log(f"{exc}; retrying")
        except TRANSIENT as exc:
            has_run = True
            first_line = (str(exc).strip().splitlines() or [""])[0]
            log(f"{type(exc).__name__}: {first_line}; restarting from the last acknowledged position")
        if not stopping():
            time.sleep(1)
    return stopping.exit_status()


def run_postgres(args: argparse.Namespace) -> int:
    from headwater.cdc.postgres import PostgresConnector

    log = command_log("cdc")

    def make() -> Connector:
        return PostgresConnector(args.dsn, _tables(args), args.topic_prefix, args.bootstrap_server,
                                 slot=args.slot, publication=args.publication,
                                 snapshot_mode=args.snapshot_mode, positions_topic=args.positions_topic,
                                 heartbeat_interval=args.heartbeat_interval, log=log,
                                 security=args.command_config, **_registry(args))
    return _supervise(make, args, log)


def run_sqlite(args: argparse.Namespace) -> int:
    from headwater.cdc import sqlite

    try:
        if args.install_triggers or args.remove_triggers:
            conn = sqlite.open_db(args.db)
            (sqlite.install if args.install_triggers else sqlite.remove)(conn, _tables(args))
            conn.close()
            return 0
    except CdcError as exc:
        print(f"headwater: error: {exc}", file=sys.stderr)
        return 1
    prefix = args.topic_prefix or os.path.splitext(os.path.basename(args.db))[0]
    log = command_log("cdc")

    def make() -> Connector:
        return sqlite.SqliteConnector(args.db, _tables(args), prefix, args.bootstrap_server,
                                      positions_topic=args.positions_topic, log=log,
                                      security=args.command_config, **_registry(args))
    return _supervise(make, args, log)
