"""The embedded event store: one SQLite file. `BEGIN IMMEDIATE` makes writers take turns,
so global positions commit in order and a tailing reader never skips one."""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager

from headwater.eventsourcing.store import EventStore, Transaction

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS events (position INTEGER PRIMARY KEY AUTOINCREMENT, stream_id TEXT NOT NULL, "
    "version INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, schema_version INTEGER NOT NULL, "
    "data TEXT NOT NULL, metadata TEXT NOT NULL, recorded_at REAL NOT NULL, UNIQUE (stream_id, version))",
    "CREATE TABLE IF NOT EXISTS snapshots (stream_id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS subject_keys (subject TEXT PRIMARY KEY, key TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS projection_checkpoints (name TEXT PRIMARY KEY, checkpoint TEXT NOT NULL)",
]


class SqliteEventStore(EventStore):
    duplicate_key = sqlite3.IntegrityError

    def __init__(self, path: str, **options):
        self.path = path
        super().__init__(**options)

    def _connect(self):
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=60, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        return conn

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
