"""The step between domain events and stored records. On the way in an event is checked
(its shape, a schema version its upcasters can read back, the application's class), its
personal fields are sealed and body and metadata become JSON text; on the way out the text
is parsed, the personal fields opened and the body upcast to its current version. The
store keeps and returns the records; the keys come from its key rows (`SubjectKeys`)."""
from __future__ import annotations

import json
from collections.abc import Sequence

from headwater.eventsourcing.events import MalformedEvent, NewEvent, RecordedEvent, StoredEvent
from headwater.eventsourcing.shredding import PersonalData, SubjectKeys
from headwater.eventsourcing.upcasting import Upcasters
from headwater.eventsourcing.validation import EventTypes

_json_object = json.JSONDecoder().decode  # json.loads less its per-call checks: decoding is half of a rebuild


class Mapper:
    def __init__(self, upcasters: Upcasters | None = None, personal: PersonalData | None = None,
                 event_types: EventTypes | None = None):
        """`event_types`: the application's event classes; given, appends must construct them."""
        self.upcasters = upcasters or Upcasters()
        self.personal = personal or PersonalData()
        self.event_types = event_types

    def encode(self, keys: SubjectKeys, stream_id: str, event: NewEvent) -> StoredEvent:
        if not isinstance(event, NewEvent) or not isinstance(event.type, str) or not event.type:
            raise MalformedEvent(f"not an event with a type name: {event!r}")
        if not isinstance(event.data, dict) or not isinstance(event.metadata, dict):
            raise MalformedEvent(f"{event.type}: body and metadata must be JSON objects")
        if not isinstance(event.schema_version, int) or event.schema_version < 1:
            raise MalformedEvent(f"{event.type}: schema version must be a positive integer")
        self.upcasters.check_writable(event.type, event.schema_version)
        if self.event_types is not None:
            self._check_type(event)
        try:
            data = self.personal.encrypt(keys, event.type, event.data)
            return StoredEvent(event.event_id, event.type, event.schema_version, json.dumps(data, allow_nan=False),
                               json.dumps(event.metadata, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise MalformedEvent(f"{event.type} in {stream_id!r}: body is not JSON: {exc}") from None

    def _check_type(self, event: NewEvent) -> None:
        """The body as it will be read (upcast to the current version) must construct its class."""
        try:
            version, body = self.upcasters.upcast(event.type, event.schema_version, event.data)
        except (KeyError, TypeError, ValueError) as exc:
            raise MalformedEvent(f"{event.type} v{event.schema_version}: its upcasters fail on this body: "
                                 f"{type(exc).__name__}: {exc}") from None
        self.event_types.check(event.type, version, body)

    def decode(self, keys: SubjectKeys, row: Sequence) -> RecordedEvent:
        """A stored row (`COLUMNS`) as the current shape of its event, personal fields opened."""
        position, stream_id, version, event_id, type_, schema_version, data, metadata, recorded_at = row
        try:
            body = _json_object(data)
            meta = {} if metadata == "{}" else _json_object(metadata)  # most events carry none: skip the parse
        except ValueError as exc:
            raise MalformedEvent(f"event {event_id} in {stream_id!r}: stored body is not JSON: {exc}") from None
        body = self.personal.decrypt(keys, type_, body)
        schema_version, body = self.upcasters.upcast(type_, schema_version, body)
        return RecordedEvent(stream_id, version, position, event_id, type_, schema_version, body, meta,
                             float(recorded_at))
