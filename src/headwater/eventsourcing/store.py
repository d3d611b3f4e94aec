"""The event store: streams of events with optimistic concurrency, idempotent atomic
appends, reads forwards and backwards, and a global position that is safe to tail; and the
key rows of crypto-shredding (one key per data subject, bytes to the store).

The SQL is shared; `sqlite_store` and `postgres_store` supply the connection, the table
definitions and how appends are serialised (which is what makes tailing safe). The store
keeps records (`StoredEvent`, rows); its `mapper` turns events into records and back.
"""
from __future__ import annotations

import base64
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from headwater.eventsourcing.events import (ANY, COLUMNS, IdempotencyConflict, MalformedEvent, NewEvent,
                                            RecordedEvent, StoredEvent, StreamNotFound, WrongExpectedVersion)
from headwater.eventsourcing.mapper import Mapper


class Transaction:
    """A cursor that takes `?` placeholders on every database."""

    def __init__(self, cursor, placeholder: str):
        self.cursor = cursor
        self._placeholder = placeholder

    def _sql(self, statement: str) -> str:
        return statement if self._placeholder == "?" else statement.replace("?", self._placeholder)

    def execute(self, statement: str, params: Sequence = ()) -> list[tuple]:
        self.cursor.execute(self._sql(statement), tuple(params))
        return self.cursor.fetchall() if self.cursor.description else []

    def executemany(self, statement: str, rows: Sequence[Sequence]) -> None:
        self.cursor.executemany(self._sql(statement), rows)


class EventStore(ABC):
    """Streams of events in one database. Not shared between threads: open one per thread."""

    placeholder = "?"
    duplicate_key: type[Exception]  # the driver's unique-violation error

    def __init__(self, mapper: Mapper | None = None):
        self.mapper = mapper or Mapper()
        self.conn = self._connect()
        with self.transaction() as tx:
            for statement in self._schema():
                tx.execute(statement)

    # -- what each database supplies
    @abstractmethod
    def _connect(self): ...

    @abstractmethod
    def _schema(self) -> list[str]: ...

    @abstractmethod
    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """One write transaction: committed on success, rolled back on any error."""

    def _serialise_appends(self, tx: Transaction) -> None:
        """Make appends commit in the order of their global positions (until commit)."""

    def close(self) -> None:
        self.conn.close()

    # -- writing
    def append(self, stream_id: str, events: Sequence[NewEvent], expected_version: int = ANY,
               snapshot: dict[str, Any] | None = None) -> int:
        """Append `events` atomically; the stream's new version. `expected_version` is the
        version the writer last saw (NO_STREAM for a new stream, ANY to skip the check).
        Re-appending events whose ids are stored (a retry) writes nothing and succeeds.
        `snapshot`, if given, is the state at the new version, stored in the same transaction."""
        if not isinstance(stream_id, str) or not stream_id:
            raise MalformedEvent(f"stream id must be a non-empty string, got {stream_id!r}")
        if not events:
            raise MalformedEvent("an append needs at least one event")
        return self.append_records(stream_id, [self.mapper.encode(self, stream_id, event) for event in events],
                                   expected_version, snapshot)

    def append_records(self, stream_id: str, records: Sequence[StoredEvent], expected_version: int = ANY,
                       snapshot: dict[str, Any] | None = None) -> int:
        """As `append`, events already mapped to what is stored."""
        now = time.time()
        try:
            with self.transaction() as tx:
                self._serialise_appends(tx)
                current = tx.execute("SELECT coalesce(max(version), 0) FROM events WHERE stream_id = ?",
                                     (stream_id,))[0][0]
                if expected_version != ANY and expected_version != current:
                    retried = self._already_appended(tx, stream_id, records)
                    if retried is not None:
                        return retried
                    raise WrongExpectedVersion(stream_id, expected_version, current)
                tx.executemany(
                    "INSERT INTO events (stream_id, version, event_id, type, schema_version, data, metadata, "
                    "recorded_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [(stream_id, current + i, *record, now) for i, record in enumerate(records, 1)])
                version = current + len(records)
                if snapshot is not None:
                    self._save_snapshot(tx, stream_id, version, snapshot)
                return version
        except self.duplicate_key:
            # an event id is stored already (ids are checked only then: appends stay one query shorter),
            # or, were appends not serialised, another writer took the version first
            with self.transaction() as tx:
                retried = self._already_appended(tx, stream_id, records)
            if retried is None:
                raise WrongExpectedVersion(stream_id, expected_version, self.stream_version(stream_id)) from None
            return retried

    @staticmethod
    def _already_appended(tx: Transaction, stream_id: str, records: Sequence[StoredEvent]) -> int | None:
        ids = [r.event_id for r in records]
        found = dict(tx.execute(f"SELECT event_id, stream_id || ':' || version FROM events WHERE event_id IN "
                                f"({', '.join('?' * len(ids))})", ids))
        if not found:
            return None
        stored = [found.get(i) for i in ids]
        if None not in stored:
            versions = [int(s.rsplit(":", 1)[1]) for s in stored]
            same_stream = all(s.rsplit(":", 1)[0] == stream_id for s in stored)
            if same_stream and versions == list(range(versions[0], versions[0] + len(versions))):
                return versions[-1]
        raise IdempotencyConflict(f"event ids {sorted(found)} are already stored, but not as this append "
                                  f"to {stream_id!r}")

    # -- reading
    def read_stream(self, stream_id: str, from_version: int | None = None, backwards: bool = False,
                    limit: int | None = None) -> list[RecordedEvent]:
        """A stream's events from `from_version` on (default: the first), or backwards down
        from it (default: the last)."""
        order, op = ("DESC", "<=") if backwards else ("ASC", ">=")
        if from_version is None:
            from_version = 2 ** 62 if backwards else 1
        rows = self.query(f"SELECT {COLUMNS} FROM events WHERE stream_id = ? AND version {op} ? "
                           f"ORDER BY version {order} LIMIT ?", (stream_id, from_version, limit or 2 ** 62))
        if not rows and self.stream_version(stream_id) == 0:
            raise StreamNotFound(stream_id)
        return [self.decode_row(row) for row in rows]

    def read_all(self, after_position: int = 0, limit: int = 1000) -> list[RecordedEvent]:
        """Events with a global position above `after_position`, in position order: a
        reader that keeps passing the last position it saw misses nothing."""
        return [self.decode_row(row) for row in self.read_all_rows(after_position, limit)]

    def read_all_rows(self, after_position: int = 0, limit: int = 1000) -> list[tuple]:
        """As `read_all`, events as stored: personal fields still encrypted, not upcast."""
        return self.query(f"SELECT {COLUMNS} FROM events WHERE position > ? ORDER BY position LIMIT ?",
                           (after_position, limit))

    def stream_version(self, stream_id: str) -> int:
        return self.query("SELECT coalesce(max(version), 0) FROM events WHERE stream_id = ?", (stream_id,))[0][0]

    def streams(self) -> list[tuple[str, int]]:
        """Every stream and its version."""
        return self.query("SELECT stream_id, max(version) FROM events GROUP BY stream_id ORDER BY stream_id")

    def head_position(self) -> int:
        return self.query("SELECT coalesce(max(position), 0) FROM events")[0][0]

    def decode_row(self, row: Sequence) -> RecordedEvent:
        """A stored row (or a relayed one) as the current shape of its event, personal fields decrypted."""
        return self.mapper.decode(self, row)

    # -- snapshots (written only with the events they summarise; see `append`)
    def latest_snapshot(self, stream_id: str) -> tuple[int, dict[str, Any]] | None:
        rows = self.query("SELECT version, state FROM snapshots WHERE stream_id = ?", (stream_id,))
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    @staticmethod
    def _save_snapshot(tx: Transaction, stream_id: str, version: int, state: dict[str, Any]) -> None:
        try:
            text = json.dumps(state, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise MalformedEvent(f"snapshot of {stream_id!r} is not JSON: {exc}") from None
        tx.execute("DELETE FROM snapshots WHERE stream_id = ?", (stream_id,))
        tx.execute("INSERT INTO snapshots (stream_id, version, state) VALUES (?, ?, ?)", (stream_id, version, text))

    def query(self, statement: str, params: Sequence = ()) -> list[tuple]:
        """A read: one statement, one consistent snapshot."""
        with self.transaction() as tx:
            return tx.execute(statement, params)

    # -- key rows (kept base64 in `subject_keys`)
    def subject_key(self, subject: str) -> bytes | None:
        rows = self.query("SELECT key FROM subject_keys WHERE subject = ?", (subject,))
        return base64.b64decode(rows[0][0]) if rows else None

    def keep_subject_key(self, subject: str, key: bytes) -> bytes:
        """`key` becomes the subject's key unless it has one already (a concurrent writer
        may create it first: then its key is the key); the subject's key."""
        with self.transaction() as tx:
            tx.execute("INSERT INTO subject_keys (subject, key) VALUES (?, ?) ON CONFLICT (subject) DO NOTHING",
                       (subject, base64.b64encode(key).decode()))
            return base64.b64decode(tx.execute("SELECT key FROM subject_keys WHERE subject = ?", (subject,))[0][0])

    def forget(self, subject: str) -> bool:
        """Delete the subject's key, if it had one (then True): their personal fields read as None
        everywhere from now on."""
        with self.transaction() as tx:
            found = tx.execute("SELECT 1 FROM subject_keys WHERE subject = ?", (subject,))
            tx.execute("DELETE FROM subject_keys WHERE subject = ?", (subject,))
        return bool(found)
