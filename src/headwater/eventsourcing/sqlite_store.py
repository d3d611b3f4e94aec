"""The embedded event store: one SQLite file. `BEGIN IMMEDIATE` makes writers take turns,
so global positions commit in order and a tailing reader never skips one."""
from __future__ import annotations

import sqlite3
import time
from contextlib import contextmanager

from headwater.eventsourcing.store import EventStore, Transaction

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS events (position INTEGER PRIMARY KEY AUTOINCREMENT, stream_id TEXT NOT NULL, "
    "version INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, schema_version INTEGER NOT NULL, "
    "data TEXT NOT NULL, metadata TEXT NOT NULL, recorded_at REAL NOT NULL, UNIQUE (stream_id, version))",
    "CREATE TABLE IF NOT EXISTS snapshots (stream_id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS subject_keys (subject TEXT PRIMARY KEY, key TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS projection_checkpoints (name TEXT PRIMARY KEY, checkpoint TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS projection_skipped (name TEXT NOT NULL, event_id TEXT NOT NULL, "
    "position INTEGER NOT NULL, stream_id TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL, "
    "error TEXT NOT NULL, skipped_at REAL NOT NULL, PRIMARY KEY (name, event_id))",
]


LOCK_TIMEOUT_S = 60


class SqliteEventStore(EventStore):
    duplicate_key = sqlite3.IntegrityError

    def __init__(self, path: str, **options):
        self.path = path
        super().__init__(**options)

    def _connect(self):
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=LOCK_TIMEOUT_S, check_same_thread=False)
        # Turning a new database to WAL takes a lock SQLite does not wait for (no busy handler):
        # stores opened at once on a fresh file retry. The mode then stays in the file. An
        # in-memory or temporary database has no file, so no WAL: it keeps its own mode.
        has_file = bool(conn.execute("PRAGMA database_list").fetchone()[2])
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                if conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal" or not has_file:
                    return conn
                failure = sqlite3.OperationalError(f"cannot switch {self.path} to WAL")
            except sqlite3.OperationalError as exc:   # 'database is locked'
                failure = exc
            if time.monotonic() > deadline:
                raise failure
            time.sleep(0.01)

    def _schema(self) -> list[str]:
        return SCHEMA

    def query(self, statement, params=()):
        # a read needs no write lock: WAL gives the statement its own snapshot
        return self.conn.execute(statement, tuple(params)).fetchall()

    @contextmanager
    def transaction(self):
        cursor = self.conn.cursor()
        cursor.execute("BEGIN IMMEDIATE")  # the write lock now, not at the first write: no upgrade deadlock
        try:
            yield Transaction(cursor, self.placeholder)
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")
