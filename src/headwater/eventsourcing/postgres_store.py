"""The event store on PostgreSQL.

Tailing safety: a sequence hands out positions in insert order, but transactions commit
in any order, so a reader following "position > last seen" could pass a position whose
transaction commits a moment later. Appends therefore take a transaction-scoped advisory
lock before drawing positions: one append at a time, and PostgreSQL makes a commit
visible before it releases the transaction's locks, so positions become visible in order.
Readers take no lock.
"""
from __future__ import annotations

from contextlib import contextmanager

import psycopg2

from headwater.eventsourcing.store import EventStore, Transaction

APPEND_LOCK = 0x6877_6576  # the advisory lock key of appends ("hwev")

SCHEMA = [
    "CREATE TABLE IF NOT EXISTS events (position BIGSERIAL PRIMARY KEY, stream_id TEXT NOT NULL, "
    "version INTEGER NOT NULL, event_id TEXT NOT NULL UNIQUE, type TEXT NOT NULL, schema_version INTEGER NOT NULL, "
    "data TEXT NOT NULL, metadata TEXT NOT NULL, recorded_at DOUBLE PRECISION NOT NULL, UNIQUE (stream_id, version))",
    "CREATE TABLE IF NOT EXISTS snapshots (stream_id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS subject_keys (subject TEXT PRIMARY KEY, key TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS projection_checkpoints (name TEXT PRIMARY KEY, checkpoint TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS projection_skipped (name TEXT NOT NULL, event_id TEXT NOT NULL, "
    "position BIGINT NOT NULL, stream_id TEXT NOT NULL, version INTEGER NOT NULL, type TEXT NOT NULL, "
    "error TEXT NOT NULL, skipped_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (name, event_id))",
]


class PostgresEventStore(EventStore):
    placeholder = "%s"
    duplicate_key = psycopg2.IntegrityError

    def __init__(self, dsn: str, **options):
        self.dsn = dsn
        super().__init__(**options)

    def _connect(self):
        return psycopg2.connect(self.dsn)

    def _schema(self) -> list[str]:
        # two stores starting at once would race on CREATE TABLE IF NOT EXISTS
        return ["SELECT pg_advisory_xact_lock(%d)" % APPEND_LOCK] + SCHEMA

    @contextmanager
    def transaction(self):
        with self.conn:  # commit on success, roll back on error
            with self.conn.cursor() as cursor:
                yield Transaction(cursor, self.placeholder)

    def _serialise_appends(self, tx: Transaction) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?)", (APPEND_LOCK,))
