"""SQLite connector: triggers fill a changelog table, a poller ships it in order.

AFTER INSERT/UPDATE/DELETE triggers write the row's before/after images as JSON into an
AUTOINCREMENT changelog table inside the writer's own transaction, so a change and its
changelog row commit together. SQLite has one writer at a time, so changelog ids increase
in commit order. The poller ships rows past its position and deletes (trims) only rows
the broker has acknowledged.
"""
import base64
import json
import os
import sqlite3
import time

from . import CdcError
from .envelope import Source, row_events, topic_name
from .shipper import PositionStore, Shipper, new_producer

CHANGELOG = "_headwater_changelog"
_TRIGGER_OPS = {"insert": "c", "update": "u", "delete": "d"}
_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"


def _q(name):
    return '"' + name.replace('"', '""') + '"'


def _trigger(table, event):
    return f"_headwater_{table}_{event}"


def open_db(path):
    if not os.path.exists(path):
        raise CdcError(f"SQLite database {path} does not exist")
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def columns(conn, table):
    """[(name, pk position)] of a table; raises if it does not exist."""
    rows = conn.execute(f"PRAGMA table_info({_q(table)})").fetchall()
    if not rows:
        raise CdcError(f"table {table} does not exist in the SQLite database")
    return [(row[1], row[5]) for row in rows]


def primary_key(cols):
    return [name for name, pk in sorted((c for c in cols if c[1]), key=lambda c: c[1])]


def _image(alias, cols):
    # Blobs are not JSON: wrap their hex so the poller can turn them into base64.
    parts = []
    for name, _ in cols:
        ref = f"{alias}.{_q(name)}"
        parts.append(f"'{name}', CASE typeof({ref}) WHEN 'blob' THEN json_object('$hex', hex({ref})) ELSE {ref} END")
    return f"json_object({', '.join(parts)})"


def install(conn, tables):
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


def remove(conn, tables):
    """Drop the capture triggers; the changelog goes too once no table is captured."""
    conn.execute("BEGIN IMMEDIATE")
    for table in tables:
        for event in _TRIGGER_OPS:
            conn.execute(f"DROP TRIGGER IF EXISTS {_q(_trigger(table, event))}")
    left = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger' AND name LIKE '\\_headwater\\_%' ESCAPE '\\'").fetchone()[0]
    if not left:
        conn.execute(f"DROP TABLE IF EXISTS {CHANGELOG}")
    conn.execute("COMMIT")


def _unwrap(image):
    if image is None:
        return None
    row = json.loads(image)
    for name, value in row.items():
        if isinstance(value, dict) and "$hex" in value:
            row[name] = base64.b64encode(bytes.fromhex(value["$hex"])).decode()
    return row


class SqliteConnector:
    """Ship the changelog of the SQLite file at `path` into `<topic_prefix>.main.<table>`
    topics. `producer` as for PostgresConnector."""

    def __init__(self, path, tables, topic_prefix, bootstrap, *,
                 positions_topic="headwater-cdc-positions", poll_interval=0.05, batch_rows=2000,
                 producer=None, log=print):
        if not tables:
            raise CdcError("no tables given")
        self.path, self.tables, self.prefix = path, tables, topic_prefix
        self.poll_interval, self.batch_rows = poll_interval, batch_rows
        self.positions = PositionStore(bootstrap, positions_topic, f"sqlite:{os.path.abspath(path)}")
        self.bootstrap, self._producer, self.log = bootstrap, producer, log
        self.shipped_rows = 0
        self.position = 0

    def run(self, should_stop=lambda: False, status_interval=2.0, on_status=None):
        conn = open_db(self.path)
        install(conn, self.tables)
        keys = {t: primary_key(columns(conn, t)) for t in self.tables}
        stored = self.positions.load(wait_log=self.log)
        self.position = stored["id"] if stored else 0
        conn.execute(f"DELETE FROM {CHANGELOG} WHERE id <= ?", (self.position,))
        shipper = Shipper(self._producer or new_producer(self.bootstrap))
        db = os.path.basename(self.path)
        last_status = time.monotonic()
        self.shipper = shipper
        while not should_stop():
            rows = conn.execute(f"SELECT id, tbl, op, before, after, ts_ms FROM {CHANGELOG} WHERE id > ? "
                                "ORDER BY id LIMIT ?", (self.position, self.batch_rows)).fetchall()
            if rows:
                batch = shipper.tracker.open()
                for row_id, table, op, before, after, ts_ms in rows:
                    source = Source("sqlite", db, "main", table, row_id, None, ts_ms, "true" if op == "r" else "false")
                    for event in row_events(topic_name(self.prefix, "main", table), keys.get(table, []),
                                            op, _unwrap(before), _unwrap(after), source):
                        shipper.send(event, batch)
                shipper.tracker.close(batch, rows[-1][0])
                self.position = rows[-1][0]
            self._store(conn, shipper, shipper.poll(0))
            if on_status and time.monotonic() - last_status >= status_interval:
                on_status(self.status_line())
                last_status = time.monotonic()
            if len(rows) < self.batch_rows:
                time.sleep(self.poll_interval)
        self._store(conn, shipper, shipper.flush(30))
        shipper.flush(30)
        conn.close()

    def _store(self, conn, shipper, durable):
        if durable is None:
            return

        def trim():
            conn.execute(f"DELETE FROM {CHANGELOG} WHERE id <= ?", (durable,))

        self.positions.save(shipper, {"id": durable}, trim)

    def status_line(self):
        durable = self.shipper.tracker.durable or 0
        return (f"shipped {self.shipper.delivered} events | changelog position {self.position} | "
                f"acknowledged {durable} | lag {self.position - durable} rows")
