"""Projections (CQRS read models): tables in the store's database kept up to date by a
catch-up subscription. Each batch of events is applied and the projection's checkpoint
written in one transaction, so after a crash the view and its checkpoint agree (effectively
exactly-once), and a rebuild costs one commit per batch, not per event.

`rebuild` replays the whole log into fresh tables, then swaps them in with the checkpoint
in one transaction: readers see the old view until the new one is complete.

An event the projection's code fails on is skipped, not retried forever (events cannot be
removed, so a projection stuck on one would never move again): the batch is redone
without it, and the event, with the error, is logged and recorded in `projection_skipped`
in the same transaction as the checkpoint that passes it.
"""
from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar

from headwater.eventsourcing.events import RecordedEvent
from headwater.eventsourcing.store import EventStore, Transaction
from headwater.eventsourcing.subscription import Checkpoint, Source, StoreSource

REBUILDING = "__rebuild"  # suffix of the tables and checkpoint of a rebuild under way
log = logging.getLogger(__name__)


class _Unapplied(Exception):
    """The projection's code failed on an event: its batch is rolled back, to be redone without it."""

    def __init__(self, event: RecordedEvent, error: str):
        super().__init__(error)
        self.event, self.error = event, error


class View:
    """The projection's tables inside one transaction; SQL names them `{logical_name}`, params `?`."""

    def __init__(self, tx: Transaction, tables: dict[str, str]):
        self._tx = tx
        self._tables = tables
        self._named: dict[str, str] = {}  # statement -> with real table names, formatted once per batch

    def execute(self, statement: str, params: Sequence = ()) -> list[tuple]:
        named = self._named.get(statement)
        if named is None:
            named = self._named[statement] = statement.format(**self._tables)
        return self._tx.execute(named, params)


class Projection(ABC):
    """Subclass with a `name`, its `tables` ({logical name: column definitions}) and `handle`."""
    name: ClassVar[str]
    tables: ClassVar[dict[str, str]]

    @abstractmethod
    def handle(self, event: RecordedEvent, view: View) -> None: ...


class ProjectionRunner:
    def __init__(self, store: EventStore, projection: Projection, source: Source | None = None):
        self.store = store
        self.projection = projection
        self.source = source or StoreSource(store)
        with store.transaction() as tx:
            self._create_tables(tx, "")

    def table_names(self, suffix: str = "") -> dict[str, str]:
        return {logical: f"{self.projection.name}_{logical}{suffix}" for logical in self.projection.tables}

    def _create_tables(self, tx: Transaction, suffix: str) -> None:
        for logical, name in self.table_names(suffix).items():
            tx.execute(f"CREATE TABLE IF NOT EXISTS {name} ({self.projection.tables[logical]})")

    def checkpoint(self, name: str | None = None) -> Checkpoint | None:
        rows = self.store.query("SELECT checkpoint FROM projection_checkpoints WHERE name = ?",
                                 (name or self.projection.name,))
        return json.loads(rows[0][0]) if rows else None

    def catch_up(self, batch_size: int = 1000) -> int:
        """Apply every event the source has now; how many were read (applied or skipped)."""
        return self._catch_up(self.projection.name, "", batch_size)

    def _catch_up(self, name: str, suffix: str, batch_size: int) -> int:
        applied = 0
        while True:
            checkpoint = self.checkpoint(name)
            events, after, caught_up = self.source.batch(checkpoint, batch_size)
            if events:
                applied += self._apply_batch(name, suffix, checkpoint, events, after)
            if caught_up:
                return applied

    def _apply_batch(self, name: str, suffix: str, checkpoint: Checkpoint | None,
                     events: list[RecordedEvent], after: Checkpoint) -> int:
        """Apply `events` and move the checkpoint to `after`; events read (applied or skipped)."""
        skipped: dict[str, _Unapplied] = {}  # by event id
        while True:
            try:
                return self._apply_without(skipped, name, suffix, checkpoint, events, after)
            except _Unapplied as failure:  # redo the batch without it: only a failure costs a redo
                event = failure.event
                log.warning("projection %s skips %s at position %d (%s v%d): %s", self.projection.name, event.type,
                            event.position, event.stream_id, event.version, failure.error)
                skipped[event.event_id] = failure

    def _apply_without(self, skipped: dict[str, _Unapplied], name: str, suffix: str, checkpoint: Checkpoint | None,
                       events: list[RecordedEvent], after: Checkpoint) -> int:
        with self.store.transaction() as tx:
            stored = tx.execute("SELECT checkpoint FROM projection_checkpoints WHERE name = ?", (name,))
            if (json.loads(stored[0][0]) if stored else None) != checkpoint:
                return 0  # another runner (or a rebuild's swap) moved it: read again from there
            view = View(tx, self.table_names(suffix))
            for event in events:
                if event.event_id in skipped:
                    continue
                try:
                    self.projection.handle(event, view)
                except Exception as exc:  # the projection's code, or its SQL, cannot take this event
                    raise _Unapplied(event, f"{type(exc).__name__}: {exc}") from exc
            if skipped:
                now = time.time()
                tx.executemany("INSERT INTO projection_skipped (name, event_id, position, stream_id, version, type, "
                               "error, skipped_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name, event_id) "
                               "DO NOTHING", [(name, f.event.event_id, f.event.position, f.event.stream_id,
                                               f.event.version, f.event.type, f.error, now) for f in skipped.values()])
            tx.execute("INSERT INTO projection_checkpoints (name, checkpoint) VALUES (?, ?) ON CONFLICT (name) "
                       "DO UPDATE SET checkpoint = excluded.checkpoint", (name, json.dumps(after)))
        return len(events)

    def follow(self, should_stop: Callable[[], bool], interval: float = 0.2, batch_size: int = 1000) -> None:
        """Tail the source until `should_stop()`."""
        while not should_stop():
            if not self.catch_up(batch_size):
                time.sleep(interval)

    def rebuild(self, batch_size: int = 1000) -> int:
        """Replay from the beginning into fresh tables, then swap them in; events replayed."""
        rebuild_name = self.projection.name + REBUILDING
        fresh, live = self.table_names(REBUILDING), self.table_names()
        with self.store.transaction() as tx:
            for name in fresh.values():
                tx.execute(f"DROP TABLE IF EXISTS {name}")
            for table in ("projection_checkpoints", "projection_skipped"):
                tx.execute(f"DELETE FROM {table} WHERE name = ?", (rebuild_name,))
            self._create_tables(tx, REBUILDING)
        replayed = self._catch_up(rebuild_name, REBUILDING, batch_size)
        with self.store.transaction() as tx:
            for logical, name in live.items():
                tx.execute(f"DROP TABLE IF EXISTS {name}")
                tx.execute(f"ALTER TABLE {fresh[logical]} RENAME TO {name}")
            for table in ("projection_checkpoints", "projection_skipped"):  # what the old code skipped goes too
                tx.execute(f"DELETE FROM {table} WHERE name = ?", (self.projection.name,))
                tx.execute(f"UPDATE {table} SET name = ? WHERE name = ?", (self.projection.name, rebuild_name))
        return replayed


def statuses(store: EventStore, defined: Iterable[str] = ()) -> list[dict]:
    """Each projection with a checkpoint, and each one `defined` (the application's, run or
    not: checkpoint None); for store-fed ones how far behind the head; events skipped."""
    head = store.head_position()
    checkpoints = dict(store.query("SELECT name, checkpoint FROM projection_checkpoints"))
    skipped = dict(store.query("SELECT name, count(*) FROM projection_skipped GROUP BY name"))
    result = []
    for name in sorted(set(checkpoints) | set(defined)):
        checkpoint = json.loads(checkpoints[name]) if name in checkpoints else None
        position = checkpoint.get("position") if checkpoint else 0
        result.append({"projection": name, "checkpoint": checkpoint, "behind": None if position is None else head - position,
                       "skipped": skipped.get(name, 0)})
    return result


def skipped_events(store: EventStore, name: str) -> list[dict]:
    """The events projection `name` skipped, in log order, with the error each raised."""
    rows = store.query("SELECT position, stream_id, version, type, event_id, error FROM projection_skipped "
                       "WHERE name = ? ORDER BY position", (name,))
    return [dict(zip(("position", "stream", "version", "type", "event_id", "error"), row)) for row in rows]
