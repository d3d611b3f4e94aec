"""Schema versions: registered upcasters turn an old event body into the current shape on
read, one version step at a time, so old logs stay readable without being rewritten."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headwater.eventsourcing.events import UnknownSchemaVersion

Body = dict[str, Any]


class Upcasters:
    """Steps `(event type, version) -> body at version + 1`. Types with no step are kept as stored."""

    def __init__(self) -> None:
        self._steps: dict[tuple[str, int], Callable[[Body], Body]] = {}

    def register(self, event_type: str, from_version: int, step: Callable[[Body], Body]) -> None:
        self._steps[(event_type, from_version)] = step

    def upcaster(self, event_type: str, from_version: int):
        """Decorator form of `register`."""
        def decorate(step: Callable[[Body], Body]) -> Callable[[Body], Body]:
            self.register(event_type, from_version, step)
            return step
        return decorate

    def current_version(self, event_type: str) -> int | None:
        """The version upcasting ends at; None for a type without upcasters."""
        versions = [v for t, v in self._steps if t == event_type]
        return max(versions) + 1 if versions else None

    def check_writable(self, event_type: str, version: int) -> None:
        """Refuse, before anything is written, a version that could never be read back."""
        current = self.current_version(event_type)
        if current is not None and (version > current or any((event_type, v) not in self._steps
                                                              for v in range(version, current))):
            raise UnknownSchemaVersion(f"{event_type} v{version}: no upcaster path to the current v{current}")

    def upcast(self, event_type: str, version: int, body: Body) -> tuple[int, Body]:
        current = self.current_version(event_type)
        if current is None:
            return version, body
        if version > current:
            raise UnknownSchemaVersion(f"{event_type} v{version} is newer than the current v{current}")
        while version < current:
            step = self._steps.get((event_type, version))
            if step is None:
                raise UnknownSchemaVersion(f"{event_type} v{version}: no upcaster registered")
            body, version = step(dict(body)), version + 1
        return version, body
