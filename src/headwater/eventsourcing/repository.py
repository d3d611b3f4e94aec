"""Loading and saving aggregates: snapshot (if any) plus the events after it; saving
appends the new events with the version the aggregate was loaded at (optimistic
concurrency) and, every `snapshot_every` events, a snapshot in the same transaction."""
from __future__ import annotations

from typing import Generic, TypeVar

from headwater.eventsourcing.aggregate import Aggregate
from headwater.eventsourcing.events import StreamNotFound
from headwater.eventsourcing.store import EventStore

A = TypeVar("A", bound=Aggregate)


class Repository(Generic[A]):
    def __init__(self, store: EventStore, aggregate_type: type[A], use_snapshots: bool = True):
        self.store = store
        self.aggregate_type = aggregate_type
        self.use_snapshots = use_snapshots

    def load(self, aggregate_id: str) -> A:
        aggregate = self.aggregate_type(aggregate_id)
        snapshot = self.store.latest_snapshot(aggregate_id) if self.use_snapshots else None
        if snapshot is not None:
            aggregate.restore(*snapshot)
        try:
            events = self.store.read_stream(aggregate_id, from_version=aggregate.version + 1)
        except StreamNotFound:
            if snapshot is None:
                raise
            events = []
        for event in events:
            aggregate.replay(event)
        return aggregate

    def save(self, aggregate: A) -> int:
        pending = aggregate.collect_pending()
        if not pending:
            return aggregate.version
        loaded_at = aggregate.version - len(pending)
        every = self.aggregate_type.snapshot_every
        due = bool(every) and aggregate.version // every > loaded_at // every
        return self.store.append(aggregate.id, [e.to_new_event() for e in pending], expected_version=loaded_at,
                                 snapshot=aggregate.state() if due else None)
