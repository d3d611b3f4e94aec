"""Aggregates: typed events (dataclasses), command methods that validate before an event
exists, and `@applies` methods saying how each event changes state. State is only ever
changed by applying events, so replaying the stream rebuilds it exactly."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from headwater.eventsourcing.events import NewEvent, RecordedEvent

E = TypeVar("E", bound="DomainEvent")


class CommandRejected(Exception):
    """A command that fails validation: no event is recorded."""


@dataclasses.dataclass(frozen=True)
class DomainEvent:
    """Base of an aggregate's events: subclass it as a frozen dataclass."""
    schema_version: ClassVar[int] = 1

    def to_new_event(self) -> NewEvent:
        return NewEvent(type(self).__name__, dataclasses.asdict(self), self.schema_version)


def applies(event_type: type[E]) -> Callable[[Callable[[Any, E], None]], Callable[[Any, E], None]]:
    """Mark an aggregate method as the way `event_type` changes its state."""
    def mark(method):
        method.applies_to = event_type
        return method
    return mark


class Aggregate:
    """Subclass with `__init__(self, id)` setting the initial state, command methods calling
    `record`, and one `@applies(Event)` method per event type."""

    snapshot_every: ClassVar[int | None] = None  # events between snapshots; None: never
    _appliers: ClassVar[dict[type, Callable]] = {}
    event_types: ClassVar[dict[str, type[DomainEvent]]] = {}

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._appliers = {m.applies_to: m for klass in reversed(cls.__mro__)  # a subclass keeps its bases' appliers
                         for m in vars(klass).values() if hasattr(m, "applies_to")}
        cls.event_types = {t.__name__: t for t in cls._appliers}

    def __init__(self, id: str):
        self.id = id
        self.version = 0
        self._pending: list[DomainEvent] = []

    def record(self, event: DomainEvent) -> None:
        """Called by command methods once validation passed."""
        self._apply(event)
        self._pending.append(event)

    def _apply(self, event: DomainEvent) -> None:
        applier = self._appliers.get(type(event))
        if applier is None:
            raise TypeError(f"{type(self).__name__} has no @applies method for {type(event).__name__}")
        applier(self, event)
        self.version += 1

    def replay(self, recorded: RecordedEvent) -> None:
        event_type = self.event_types.get(recorded.type)
        if event_type is None:
            raise TypeError(f"{type(self).__name__} does not know event type {recorded.type!r}")
        self._apply(event_type(**recorded.data))

    def collect_pending(self) -> list[DomainEvent]:
        pending, self._pending = self._pending, []
        return pending

    def state(self) -> dict[str, Any]:
        """The snapshot of this aggregate: its attributes (JSON values)."""
        return {k: v for k, v in vars(self).items() if k not in ("id", "version", "_pending")}

    def restore(self, version: int, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self.version = version
