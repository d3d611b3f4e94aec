"""Projections (CQRS read models): tables in the store's database kept up to date by a
catch-up subscription. Each batch of events is applied and the projection's checkpoint
written in one transaction, so after a crash the view and its checkpoint agree (effectively
exactly-once), and a rebuild costs one commit per batch, not per event.

`rebuild` replays the whole log into fresh tables, then swaps them in with the checkpoint
in one transaction: readers see the old view until the new one is complete.
"""
from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import ClassVar

from headwater.eventsourcing.events import RecordedEvent
from headwater.eventsourcing.store import EventStore, Transaction
from headwater.eventsourcing.subscription import Checkpoint, Source, StoreSource

REBUILDING = "__rebuild"  # suffix of the tables and checkpoint of a rebuild under way


class ProjectionFailed(Exception):
    """A projection's code failed on an event: its batch was rolled back, the view is as before."""


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
        """Apply every event the source has now; how many were applied."""
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
        with self.store.transaction() as tx:
            stored = tx.execute("SELECT checkpoint FROM projection_checkpoints WHERE name = ?", (name,))
            if (json.loads(stored[0][0]) if stored else None) != checkpoint:
                return 0  # another runner (or a rebuild's swap) moved it: read again from there
            view = View(tx, self.table_names(suffix))
            for event in events:
                try:
                    self.projection.handle(event, view)
                except Exception as exc:
                    raise ProjectionFailed(f"projection {self.projection.name} failed on {event.type} at position "
                                           f"{event.position} ({event.stream_id} v{event.version}): "
                                           f"{type(exc).__name__}: {exc}") from exc
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
            tx.execute("DELETE FROM projection_checkpoints WHERE name = ?", (rebuild_name,))
            self._create_tables(tx, REBUILDING)
        replayed = self._catch_up(rebuild_name, REBUILDING, batch_size)
        with self.store.transaction() as tx:
            for logical, name in live.items():
                tx.execute(f"DROP TABLE IF EXISTS {name}")
                tx.execute(f"ALTER TABLE {fresh[logical]} RENAME TO {name}")
            tx.execute("DELETE FROM projection_checkpoints WHERE name = ?", (self.projection.name,))
            tx.execute("UPDATE projection_checkpoints SET name = ? WHERE name = ?", (self.projection.name, rebuild_name))
        return replayed


def statuses(store: EventStore) -> list[dict]:
    """Each projection's checkpoint and, for store-fed ones, how far behind the head it is."""
    head = store.head_position()
    rows = store.query("SELECT name, checkpoint FROM projection_checkpoints ORDER BY name")
    result = []
    for name, text in rows:
        checkpoint = json.loads(text)
        position = checkpoint.get("position")
        result.append({"projection": name, "checkpoint": text,
                       "behind": None if position is None else head - position})
    return result
