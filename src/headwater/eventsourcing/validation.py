"""The application's event classes as the schema of appends: a body is stored only if it
constructs the class of its type (after upcasting to the current version), so every
event in the log is one the application's aggregates and projections can read back."""
from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Iterable
from typing import Any

from headwater.eventsourcing.events import MalformedEvent

JSON_SHAPES = {list: list, tuple: list, dict: dict}  # what a container field is once it went through JSON


class EventTypes:
    """{type name: dataclass}: the event classes an application records (e.g. its
    aggregates' `event_types`), each with a `schema_version` (default 1)."""

    def __init__(self, classes: Iterable[type]):
        self.classes = {cls.__name__: cls for cls in classes}

    def check(self, event_type: str, schema_version: int, body: dict[str, Any]) -> None:
        """Raise MalformedEvent, naming the type and field, unless `body` constructs the class."""
        cls = self.classes.get(event_type)
        if cls is None:
            raise MalformedEvent(f"unknown event type {event_type!r}; the application's types are "
                                 f"{', '.join(sorted(self.classes))}")
        current = getattr(cls, "schema_version", 1)
        if schema_version != current:
            raise MalformedEvent(f"{event_type} v{schema_version}: the application's {event_type} is v{current}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for name in body:
            if name not in fields:
                raise MalformedEvent(f"{event_type}: unknown field {name!r}; its fields are {', '.join(fields)}")
        hints = typing.get_type_hints(cls)
        for name, field in fields.items():
            if name not in body:
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
                    raise MalformedEvent(f"{event_type}: missing field {name!r}")
            elif not _fits(body[name], hints[name]):
                raise MalformedEvent(f"{event_type}: field {name!r} must be {_name(hints[name])}, "
                                     f"got {body[name]!r}")


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value can be a field annotated `hint` (hints beyond JSON's shapes pass)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin in JSON_SHAPES or hint in JSON_SHAPES:
        return isinstance(value, JSON_SHAPES[origin or hint])
    if hint in (int, float):  # JSON has one number type; a bool is not a number here
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    if hint in (str, bool):
        return isinstance(value, hint)
    return True


def _name(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint)
