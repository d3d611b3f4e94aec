"""Event sourcing and CQRS: an event store (SQLite embedded, PostgreSQL), aggregates,
snapshots, upcasters, projections rebuilt from the log, an outbox relay to a topic and
crypto-shredding of personal data."""
from headwater.eventsourcing.events import (ANY, NO_STREAM, EventStoreError, IdempotencyConflict, MalformedEvent,
                                            NewEvent, RecordedEvent, StreamNotFound, UnknownSchemaVersion,
                                            WrongExpectedVersion)
from headwater.eventsourcing.engines import open_store
from headwater.eventsourcing.store import EventStore

__all__ = ["ANY", "NO_STREAM", "EventStore", "EventStoreError", "IdempotencyConflict", "MalformedEvent", "NewEvent",
           "RecordedEvent", "StreamNotFound", "UnknownSchemaVersion", "WrongExpectedVersion", "open_store"]
