"""The application's event classes as Avro schemas in a schema registry, one subject per event
type (`events.<Type>`), each schema version of a type one version of its subject. The registry
judges each change at the subject's compatibility level (BACKWARD unless set), so an upcaster is
accepted only when the registry accepts the version it upcasts to after the version it upcasts
from: a schema change the registry's consumers could not follow fails when the upcaster is
registered, at start, not when the first old event is read."""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Callable
from typing import Any

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from headwater.eventsourcing.events import EventStoreError
from headwater.eventsourcing.upcasting import Body, Upcasters

AVRO_SCALARS = {str: "string", int: "long", float: "double", bool: "boolean", bytes: "bytes"}
NAMESPACE = "headwater.events"


class IncompatibleEventSchema(EventStoreError):
    """The schema registry refused an event type's new schema version."""


def avro_type(hint: Any) -> Any:
    """A field's Avro type from its annotation: scalars, `X | None`, `list[X]`, `dict[str, X]`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        others = [a for a in args if a is not type(None)]
        if len(others) == 1 and len(args) == 2:
            return ["null", avro_type(others[0])]
    elif origin in (list, tuple) and len(args) == 1:
        return {"type": "array", "items": avro_type(args[0])}
    elif origin is dict and args[:1] == (str,):
        return {"type": "map", "values": avro_type(args[1])}
    elif hint in AVRO_SCALARS:
        return AVRO_SCALARS[hint]
    raise TypeError(f"no Avro type for {hint!r}")


def avro_schema(cls: type, name: str | None = None) -> dict:
    """A dataclass event's record schema, named `name` (an older version's class keeps its type's name)."""
    hints = typing.get_type_hints(cls)
    fields = []
    for field in dataclasses.fields(cls):
        entry: dict[str, Any] = {"name": field.name, "type": avro_type(hints[field.name])}
        if field.default is not dataclasses.MISSING:
            entry["default"] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            entry["default"] = field.default_factory()
        if "default" in entry and entry["default"] is not None and isinstance(entry["type"], list):
            entry["type"] = entry["type"][::-1]         # Avro: a union's default has its first branch's type
        fields.append(entry)
    return {"type": "record", "name": name or cls.__name__, "namespace": NAMESPACE, "fields": fields}


class EventSchemas:
    def __init__(self, registry: SchemaRegistryClient, prefix: str = "events."):
        self.registry, self.prefix = registry, prefix

    def subject(self, event_type: str) -> str:
        return self.prefix + event_type

    def register(self, cls: type, event_type: str | None = None) -> int:
        """The class's schema as a version of its type's subject (again: its id, nothing new);
        IncompatibleEventSchema with the registry's reasons if the subject's level refuses it."""
        event_type = event_type or cls.__name__
        schema = Schema(json.dumps(avro_schema(cls, event_type)), "AVRO")
        try:
            return self.registry.register_schema(self.subject(event_type), schema)
        except SchemaRegistryError as exc:
            if exc.http_status_code != 409:
                raise
            raise IncompatibleEventSchema(
                f"{event_type} v{getattr(cls, 'schema_version', 1)} ({cls.__name__}): the schema registry refuses it "
                f"after the versions of {self.subject(event_type)!r}: {exc.error_message}") from None

    def upcaster(self, upcasters: Upcasters, old: type, new: type) -> Callable[[Callable[[Body], Body]], Callable]:
        """`upcasters.upcaster(type, old's version)` once the registry accepted `new` after `old`;
        `new` is the type's class at the next version (its name is the type's)."""
        version = getattr(old, "schema_version", 1)
        if getattr(new, "schema_version", 1) != version + 1:
            raise IncompatibleEventSchema(f"{new.__name__} v{getattr(new, 'schema_version', 1)} does not follow "
                                          f"{old.__name__} v{version}")
        self.register(old, new.__name__)
        self.register(new)
        return upcasters.upcaster(new.__name__, version)
