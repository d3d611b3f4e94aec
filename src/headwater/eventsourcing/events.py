"""What the store keeps: events as they are appended, as stored and as they are read back, and its errors."""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, NamedTuple

ANY = -1        # expected version: append whatever the stream holds
NO_STREAM = 0   # expected version: the stream must not exist yet
COLUMNS = "position, stream_id, version, event_id, type, schema_version, data, metadata, recorded_at"  # a stored row


class EventStoreError(Exception):
    """A request the store refuses; nothing was written."""


class WrongExpectedVersion(EventStoreError):
    """Optimistic concurrency: another writer appended to the stream first."""

    def __init__(self, stream_id: str, expected: int, actual: int):
        super().__init__(f"stream {stream_id!r} is at version {actual}, not the expected {expected}")
        self.stream_id, self.expected, self.actual = stream_id, expected, actual


class StreamNotFound(EventStoreError):
    def __init__(self, stream_id: str):
        super().__init__(f"stream {stream_id!r} does not exist")
        self.stream_id = stream_id


class IdempotencyConflict(EventStoreError):
    """Event ids seen before, but not as the same append to the same stream."""


class MalformedEvent(EventStoreError):
    """An event whose type, body or metadata the store cannot keep."""


class UnknownSchemaVersion(EventStoreError):
    """An event's schema version that no registered upcaster turns into the current shape."""


@dataclass(frozen=True)
class NewEvent:
    type: str
    data: dict[str, Any]
    schema_version: int = 1
    metadata: dict[str, Any] = field(default_factory=dict)
    event_id: str = field(default_factory=lambda: str(uuid.uuid4()))


@dataclass(frozen=True)
class RecordedEvent:
    stream_id: str
    version: int            # 1-based position in its stream
    position: int           # global position: increases in commit order, safe to tail
    event_id: str
    type: str
    schema_version: int
    data: dict[str, Any]
    metadata: dict[str, Any]
    recorded_at: float      # seconds since the epoch


class StoredEvent(NamedTuple):
    """An event as the store writes it: body and metadata as JSON text, personal fields sealed."""
    event_id: str
    type: str
    schema_version: int
    data: str
    metadata: str
