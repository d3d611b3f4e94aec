"""SQLite connector: triggers fill a changelog table, a poller ships it in order.

AFTER INSERT/UPDATE/DELETE triggers write the row's before/after images as JSON into an
AUTOINCREMENT changelog table inside the writer's own transaction, so a change and its
changelog row commit together. SQLite has one writer at a time, so changelog ids increase
in commit order. The poller ships rows past its position and deletes (trims) only rows
the broker has acknowledged.
"""
from __future__ import annotations

import base64
import json
import os
import sqlite3
import time
from typing import Callable

from confluent_kafka import Producer

from . import CdcError
from .avro_columns import AvroColumn, sqlite_column
from .avro_events import AvroEvents
from .connector import Connector
from .envelope import JSON, EventFormat, Source, row_events, topic_name
from .shipper import PositionStore, Shipper, new_producer

CHANGELOG = "_headwater_changelog"
_TRIGGER_OPS = {"insert": "c", "update": "u", "delete": "d"}
_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _trigger(table: str, event: str) -> str:
    return f"_headwater_{table}_{event}"


def open_db(path: str) -> sqlite3.Connection:
    if not os.path.exists(path):
        raise CdcError(f"SQLite database {path} does not exist")
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, int]]:
    """[(name, pk position)] of a table; raises if it does not exist."""
    rows = conn.execute(f"PRAGMA table_info({_q(table)})").fetchall()
    if not rows:
        raise CdcError(f"table {table} does not exist in the SQLite database")
    return [(row[1], row[5]) for row in rows]


def typed_columns(conn: sqlite3.Connection, table: str) -> list[AvroColumn]:
    """A table's columns as Avro fields, by their declared types."""
    return [sqlite_column(row[1], row[2]) for row in conn.execute(f"PRAGMA table_info({_q(table)})")]


def primary_key(cols: list[tuple[str, int]]) -> list[str]:
    return [name for name, pk in sorted((c for c in cols if c[1]), key=lambda c: c[1])]


def _image(alias: str, cols: list[tuple[str, int]]) -> str:
    # Blobs are not JSON: wrap their hex so the poller can turn them into base64.
    parts = []
    for name, _ in cols:
        ref = f"{alias}.{_q(name)}"
        parts.append(f"'{name}', CASE typeof({ref}) WHEN 'blob' THEN json_object('$hex', hex({ref})) ELSE {ref} END")
    return f"json_object({', '.join(parts)})"


def install(conn: sqlite3.Connection, tables: list[str]) -> None:
    """Create (or re-create, after a schema change) the capture triggers, in one transaction.

    A table captured for the first time is also copied into the changelog as `r` rows in that
    same transaction: the snapshot and the first change meet with no gap and no overlap.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {CHANGELOG} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                     "tbl TEXT NOT NULL, op TEXT NOT NULL, before TEXT, after TEXT, ts_ms INTEGER NOT NULL)")
        for table in tables:
            cols = columns(conn, table)
            known = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = ?",
                                 (_trigger(table, "insert"),)).fetchone()
            for event, op in _TRIGGER_OPS.items():
                conn.execute(f"DROP TRIGGER IF EXISTS {_q(_trigger(table, event))}")
                before = _image("OLD", cols) if op != "c" else "NULL"
                after = _image("NEW", cols) if op != "d" else "NULL"
                conn.execute(
                    f"CREATE TRIGGER {_q(_trigger(table, event))} AFTER {event.upper()} ON {_q(table)} BEGIN "
                    f"INSERT INTO {CHANGELOG} (tbl, op, before, after, ts_ms) "
                    f"VALUES ('{table}', '{op}', {before}, {after}, {_NOW_MS}); END")
            if not known:
                conn.execute(f"INSERT INTO {CHANGELOG} (tbl, op, before, after, ts_ms) "
                             f"SELECT '{table}', 'r', NULL, {_image(_q(table), cols)}, {_NOW_MS} FROM {_q(table)}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def remove(conn: sqlite3.Connection, tables: list[str]) -> None:
    """Drop the capture triggers; the changelog goes too once no table is captured."""
    conn.execute("BEGIN IMMEDIATE")
    for table in tables:
        for event in _TRIGGER_OPS:
            conn.execute(f"DROP TRIGGER IF EXISTS {_q(_trigger(table, event))}")
    left = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE '\\_headwater\\_%' ESCAPE '\\'").fetchone()[0]
    if not left:
        conn.execute(f"DROP TABLE IF EXISTS {CHANGELOG}")
    conn.execute("COMMIT")


def _unwrap(image: str | None) -> dict | None:
    if image is None:
        return None
    row = json.loads(image)
    for name, value in row.items():
        if isinstance(value, dict) and "$hex" in value:
            row[name] = base64.b64encode(bytes.fromhex(value["$hex"])).decode()
    return row


def _typed(table: str, columns: list[AvroColumn], row: dict | None) -> dict | None:
    if row is None:
        return None
    try:
        return {c.name: None if row.get(c.name) is None else c.convert(row[c.name]) for c in columns}
    except ValueError as exc:
        raise CdcError(f"table main.{table}: a value does not fit its column's declared type in Avro: {exc}") from None


class SqliteConnector(Connector):
    """Ship the changelog of the SQLite file at `path` into `<topic_prefix>.main.<table>`
    topics. `producer`, `security`, `schema_registry` and `registry_config` as for
    PostgresConnector; a table's Avro schema is its columns' when the connector starts."""

    def __init__(self, path: str, tables: list[str], topic_prefix: str, bootstrap: str, *,
                 positions_topic: str = "headwater-cdc-positions", poll_interval: float = 0.05,
                 batch_rows: int = 2000, producer: Producer | None = None, log: Callable[[str], None] = print,
                 security: dict[str, str] | None = None, schema_registry: str | None = None,
                 registry_config: dict[str, str] | None = None):
        if not tables:
            raise CdcError("no tables given")
        super().__init__()
        self.path, self.tables, self.prefix = path, tables, topic_prefix
        self.poll_interval, self.batch_rows = poll_interval, batch_rows
        self.positions = PositionStore(bootstrap, positions_topic, f"sqlite:{os.path.abspath(path)}", security)
        self.security = security
        self.bootstrap, self._producer, self.log = bootstrap, producer, log
        self.position = 0  # the last changelog id handed to the producer
        self._conn: sqlite3.Connection | None = None
        self._shipper: Shipper | None = None
        self._keys: dict[str, list[str]] = {}
        self.events: EventFormat = AvroEvents(schema_registry, registry_config) if schema_registry else JSON
        self._typed: dict[str, list[AvroColumn]] = {}  # table -> its columns, in Avro

    def start(self) -> None:
        self._conn = conn = open_db(self.path)
        install(conn, self.tables)
        self._keys = {t: primary_key(columns(conn, t)) for t in self.tables}
        if self.events.typed:  # read with the triggers just installed: their columns are these
            for table in self.tables:
                self._avro_columns(table)
        stored = self.positions.load(wait_log=self.log, should_stop=self.stop_requested)
        self.position = stored["id"] if stored else 0
        conn.execute(f"DELETE FROM {CHANGELOG} WHERE id <= ?", (self.position,))
        self._shipper = Shipper(self._producer or new_producer(self.bootstrap, self.security),
                                should_stop=self.stop_requested)
        self._started = True

    def _ship(self, stopping: Callable[[], bool]) -> None:
        conn, shipper = self._conn, self._shipper
        db = os.path.basename(self.path)
        while not stopping():
            rows = conn.execute(f"SELECT id, tbl, op, before, after, ts_ms FROM {CHANGELOG} WHERE id > ? "
                                "ORDER BY id LIMIT ?", (self.position, self.batch_rows)).fetchall()
            if rows:
                batch = shipper.tracker.open()
                for row_id, table, op, before, after, ts_ms in rows:
                    source = Source("sqlite", db, "main", table, row_id, None, ts_ms, "true" if op == "r" else "false")
                    before, after = _unwrap(before), _unwrap(after)
                    if self.events.typed:
                        typed = self._avro_columns(table)
                        before, after = _typed(table, typed, before), _typed(table, typed, after)
                    shipper.send_all(row_events(topic_name(self.prefix, "main", table), self._keys.get(table, []),
                                                op, before, after, source.as_json(), self.events), batch)
                shipper.tracker.close(batch, rows[-1][0])
                self.position = rows[-1][0]
            self._store(shipper.settle())
            self.ticker.tick()
            if len(rows) < self.batch_rows:
                time.sleep(self.poll_interval)
        self._store(shipper.flush_on_stop(self.log))
        shipper.flush_on_stop(self.log)

    def _avro_columns(self, table: str) -> list[AvroColumn]:
        """The table's columns in Avro, told to `events` once per start (a table captured before
        but not now may still have changes in the changelog: they use its columns now)."""
        typed = self._typed.get(table)
        if typed is None:
            typed = self._typed[table] = typed_columns(self._conn, table)
            self.events.define(f"main.{table}", topic_name(self.prefix, "main", table), typed,
                               self._keys.get(table, []))
        return typed

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def _store(self, durable: int | None) -> None:
        """Save the durable position; trim the changelog once the broker holds the position too."""
        if durable is None:
            return

        def trim() -> None:
            self._conn.execute(f"DELETE FROM {CHANGELOG} WHERE id <= ?", (durable,))

        self.positions.save(self._shipper, {"id": durable}, trim)

    def status(self) -> str:
        shipped = self._shipper.delivered if self._shipper else 0
        durable = (self._shipper and self._shipper.tracker.durable) or 0
        return (f"shipped {shipped} events | changelog position {self.position} | "
                f"acknowledged {durable} | lag {self.position - durable} rows")
