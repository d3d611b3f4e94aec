"""Per-topic log configuration: Kafka's topic config names, defaults and validation.

A topic's effective config is the broker defaults overlaid with the overrides given at
CreateTopics / AlterConfigs; only the overrides are persisted with the topic.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DELETE = "delete"
COMPACT = "compact"
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    flush_messages: int | None = None   # fsync after this many messages appended (None = leave to the OS)
    flush_ms: int | None = None         # fsync when this long since the last fsync (checked on append)
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = DELETE        # "delete", "compact" or "compact,delete"
    retention_ms: int = 7 * 24 * 3600 * 1000   # -1 = keep forever
    retention_bytes: int = -1                  # per partition; -1 = unbounded
    min_compaction_lag_ms: int = 0
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 24 * 3600 * 1000
    max_message_bytes: int = 1048588

    @property
    def compact(self) -> bool:
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return DELETE in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @classmethod
    def from_topic_configs(cls, configs: dict[str, str], defaults: LogConfig) -> LogConfig:
        """Overlay Kafka-named ``configs`` on ``defaults``; ValueError names the bad key or value."""
        changes = {}
        for name, value in configs.items():
            spec = _SPECS.get(name)
            if spec is None:
                raise ValueError(f"unknown topic config {name!r}")
            field, parse = spec
            try:
                changes[field] = parse(str(value).strip())
            except ValueError as exc:
                raise ValueError(f"invalid value {value!r} for topic config {name!r}: {exc}") from None
        return dataclasses.replace(defaults, **changes)

    def to_topic_configs(self) -> dict[str, str]:
        """Every config under its Kafka name, as strings (what DescribeConfigs shows)."""
        out = {}
        for name, (field, _) in _SPECS.items():
            value = getattr(self, field)
            out[name] = _LONG_MAX if value is None else str(value)
        return out


_LONG_MAX = str(2**63 - 1)  # Kafka's "never" for flush.messages / flush.ms


def _int(minimum: int, maximum: int = 2**63 - 1):
    def parse(text: str) -> int:
        value = int(text)
        if not minimum <= value <= maximum:
            raise ValueError(f"must be between {minimum} and {maximum}")
        return value
    return parse


def _optional_int(minimum: int):
    parse_int = _int(minimum)

    def parse(text: str) -> int | None:
        return None if text == _LONG_MAX else parse_int(text)
    return parse


def _ratio(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise ValueError("must be between 0 and 1")
    return value


def _timestamp_type(text: str) -> str:
    if text not in TIMESTAMP_TYPES:
        raise ValueError(f"must be one of {', '.join(TIMESTAMP_TYPES)}")
    return text


def _cleanup_policy(text: str) -> str:
    policies = [p.strip() for p in text.split(",") if p.strip()]
    if not policies or any(p not in (DELETE, COMPACT) for p in policies):
        raise ValueError("must be delete, compact, or compact,delete")
    return ",".join(sorted(set(policies)))


_SPECS = {
    "segment.bytes": ("segment_bytes", _int(14, 2**31 - 1)),  # positions in the offset index are u32
    "segment.ms": ("segment_ms", _int(1)),
    "index.interval.bytes": ("index_interval_bytes", _int(0)),
    "flush.messages": ("flush_messages", _optional_int(1)),
    "flush.ms": ("flush_ms", _optional_int(0)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "retention.ms": ("retention_ms", _int(-1)),
    "retention.bytes": ("retention_bytes", _int(-1)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _int(0)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
    "delete.retention.ms": ("delete_retention_ms", _int(0)),
    "max.message.bytes": ("max_message_bytes", _int(0, 2**31 - 1)),
}
TOPIC_CONFIG_NAMES = tuple(_SPECS)
