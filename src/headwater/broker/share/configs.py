"""Share-group configs: Kafka's names and defaults, changeable per group (IncrementalAlterConfigs
on the GROUP resource, ``headwater groups alter``)."""
from __future__ import annotations

from collections.abc import Mapping

DEFAULTS: dict[str, str] = {
    "share.auto.offset.reset": "latest",
    "share.record.lock.duration.ms": "30000",
    "share.delivery.count.limit": "5",
    "share.heartbeat.interval.ms": "5000",
    "share.session.timeout.ms": "45000",
    "share.isolation.level": "read_uncommitted",     # read_committed: nothing past the LSO, no aborted record
    "errors.deadletterqueue.topic.name": "",
    "errors.deadletterqueue.copy.record.enable": "false",
}
_INTS = {"share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 2,
         "share.heartbeat.interval.ms": 1000, "share.session.timeout.ms": 1000}   # name -> smallest value
_CHOICES = {"share.auto.offset.reset": {"latest", "earliest"},
            "share.isolation.level": {"read_uncommitted", "read_committed"},
            "errors.deadletterqueue.copy.record.enable": {"true", "false"}}


def validate(name: str, value: str) -> None:
    """ValueError naming the problem if ``name`` is not a share-group config or ``value`` does not fit it."""
    if name not in DEFAULTS:
        raise ValueError(f"unknown group config {name!r}")
    if name in _INTS:
        if not value.lstrip("-").isdigit() or int(value) < _INTS[name]:
            raise ValueError(f"{name} must be an integer of at least {_INTS[name]}, got {value!r}")
    elif name in _CHOICES and value not in _CHOICES[name]:
        raise ValueError(f"{name} must be one of {sorted(_CHOICES[name])}, got {value!r}")


class GroupConfig:
    """The effective configs of one group: its overrides over the defaults."""

    def __init__(self, overrides: Mapping[str, str] | None = None):
        self.overrides = dict(overrides or {})

    def get(self, name: str) -> str:
        return self.overrides.get(name, DEFAULTS[name])

    def int(self, name: str) -> int:
        return int(self.get(name))

    def entries(self) -> list[tuple[str, str | None, bool]]:
        """(name, value or None when unset, overridden) of every config, for DescribeConfigs."""
        return [(name, self.get(name) or None, name in self.overrides) for name in DEFAULTS]

    @property
    def dead_letter_topic(self) -> str | None:
        return self.get("errors.deadletterqueue.topic.name") or None
