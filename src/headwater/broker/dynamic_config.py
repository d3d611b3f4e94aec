"""Dynamic broker configs: the broker-level defaults of topic configs, changed at run time by
AlterConfigs / IncrementalAlterConfigs on the broker resource and kept in the data directory.

Kafka's two levels: this broker's own (resource name: its id, DYNAMIC_BROKER_CONFIG) over the
cluster-wide default (empty resource name, DYNAMIC_DEFAULT_BROKER_CONFIG), both over the
defaults the broker started with (``--log-config``, STATIC_BROKER_CONFIG). Under Kafka's broker
names (``log.retention.ms``), each the default of one topic config (``retention.ms``); a topic's
own override still wins.
"""
from __future__ import annotations

import json
from pathlib import Path

from headwater.log import LogConfig
from headwater.log.layout import read_json, replace_atomically

BROKER_LEVEL, DEFAULT_LEVEL = "broker", "default"
LEVELS = (DEFAULT_LEVEL, BROKER_LEVEL)  # in the order they overlay each other
FILE = "broker-configs.json"

# Kafka's broker config -> the topic config it is the default of (Kafka's ServerTopicConfigSynonyms),
# for the topic configs Headwater has. message.max.bytes is not here: on Headwater it bounds a whole
# produce request, set at start-up.
TOPIC_CONFIG_SYNONYMS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.roll.jitter.ms": "segment.jitter.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.retention.bytes": "retention.bytes",
    "log.retention.ms": "retention.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
    "log.segment.delete.delay.ms": "file.delete.delay.ms",
    "log.preallocate": "preallocate",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.message.timestamp.difference.max.ms": "message.timestamp.difference.max.ms",
    "log.message.timestamp.before.max.ms": "message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms": "message.timestamp.after.max.ms",
    "log.message.downconversion.enable": "message.downconversion.enable",
    "log.local.retention.ms": "local.retention.ms",
    "log.local.retention.bytes": "local.retention.bytes",
    "compression.type": "compression.type",
    "compression.gzip.level": "compression.gzip.level",
    "compression.lz4.level": "compression.lz4.level",
    "compression.zstd.level": "compression.zstd.level",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
}
BROKER_SYNONYMS = {topic: broker for broker, topic in TOPIC_CONFIG_SYNONYMS.items()}


class DynamicBrokerConfigs:
    """Both levels, as set; ``topic_defaults`` makes them the defaults topics inherit."""

    def __init__(self, data_dir: Path):
        self._path = data_dir / FILE
        stored = read_json(self._path, {})
        self.levels: dict[str, dict[str, str]] = {level: stored.get(level, {}) for level in LEVELS}

    def topic_defaults(self, static: LogConfig, changed: tuple[str, dict[str, str]] | None = None) -> LogConfig:
        """``static`` overlaid with the cluster default, then with this broker's configs; with
        ``changed`` (level, configs) in place of that level's. ValueError names a bad name or value."""
        levels = dict(self.levels) | dict([changed] if changed else [])
        defaults = static
        for level in LEVELS:
            for name, value in levels[level].items():
                if name not in TOPIC_CONFIG_SYNONYMS:
                    raise ValueError(f"Cannot update these configs dynamically: {name!r}")
                try:
                    defaults = LogConfig.from_topic_configs({TOPIC_CONFIG_SYNONYMS[name]: value}, defaults)
                except ValueError as exc:
                    raise ValueError(f"broker config {name!r}: {exc}") from None
        return defaults

    def replace(self, level: str, configs: dict[str, str]) -> None:
        """Make ``configs`` the whole of ``level`` (checked by ``topic_defaults`` first), durably."""
        levels = self.levels | {level: dict(configs)}
        replace_atomically(self._path, json.dumps(levels, sort_keys=True, indent=1))
        self.levels = levels

    def source_level(self, broker_name: str) -> str | None:
        """The innermost level that sets ``broker_name``, if any."""
        return next((level for level in reversed(LEVELS) if broker_name in self.levels[level]), None)
