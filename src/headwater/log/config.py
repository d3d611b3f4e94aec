"""Per-topic log configuration: Kafka's topic config names, defaults and validation.

A topic's effective config is the broker defaults overlaid with the overrides given at
CreateTopics / AlterConfigs; only the overrides are persisted with the topic.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from headwater.records import Compression
from headwater.records.layout import MESSAGE_MAX_BYTES
from headwater.records.validator import AppendRules

DELETE = "delete"
COMPACT = "compact"
PRODUCER = "producer"  # compression.type: keep each batch as its producer compressed it
CODECS = {"uncompressed": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}  # compression.type: the broker recompresses to it
COMPRESSION_TYPES = (PRODUCER, *CODECS)
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
    max_message_bytes: int = MESSAGE_MAX_BYTES
    compression_type: str = PRODUCER    # a codec name: the broker recompresses batches to it
    message_timestamp_before_max_ms: int | None = None  # refuse records older than now minus this
    message_timestamp_after_max_ms: int | None = None   # refuse records newer than now plus this
    # Kafka's other topic configs: accepted, validated and reported; on one broker without
    # tiered storage or replicas they change nothing (see docs/protocol.md).
    min_insync_replicas: int = 1
    max_compaction_lag_ms: int | None = None
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    file_delete_delay_ms: int = 60_000
    preallocate: str = "false"
    unclean_leader_election_enable: str = "false"
    message_downconversion_enable: str = "true"
    message_format_version: str = "3.0-IV1"
    message_timestamp_difference_max_ms: int | None = None
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    leader_replication_throttled_replicas: str = ""
    follower_replication_throttled_replicas: str = ""
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_storage_enable: str = "false"
    # append_rules' last answer, with the message_max_bytes it was for: asked by every produce request,
    # and a topic's configs change by replacing its LogConfig (LogManager.alter_topic_configs, set_defaults),
    # never by assigning to one, so what is kept here is this config's.
    _rules: tuple[int, AppendRules] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def compact(self) -> bool:
        return COMPACT in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        return DELETE in self.cleanup_policy.split(",")

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    def append_rules(self, message_max_bytes: int) -> AppendRules:
        """What the log validator checks an append to this topic against; ``message_max_bytes``
        is the broker's."""
        kept = self._rules   # read once: the validator thread may replace it meanwhile
        if kept is not None and kept[0] == message_max_bytes:
            return kept[1]
        # As Kafka: the deprecated difference.max.ms stands in for whichever of the two is unset.
        difference = self.message_timestamp_difference_max_ms
        before, after = self.message_timestamp_before_max_ms, self.message_timestamp_after_max_ms
        rules = AppendRules(max_request_bytes=message_max_bytes, max_batch_bytes=self.max_message_bytes,
                            keys_required=self.compact, log_append_time=self.log_append_time,
                            timestamp_before_max_ms=difference if before is None else before,
                            timestamp_after_max_ms=difference if after is None else after,
                            compression=CODECS.get(self.compression_type))
        self._rules = message_max_bytes, rules
        return rules

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


def _one_of(*choices: str):
    def parse(text: str) -> str:
        if text.lower() not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}")
        return text.lower()
    return parse


def _text(text: str) -> str:
    return text


_boolean = _one_of("true", "false")

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
    "compression.type": ("compression_type", _one_of(*COMPRESSION_TYPES)),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", _optional_int(0)),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", _optional_int(0)),
    "min.insync.replicas": ("min_insync_replicas", _int(1, 2**31 - 1)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _optional_int(1)),
    "segment.jitter.ms": ("segment_jitter_ms", _int(0)),
    "segment.index.bytes": ("segment_index_bytes", _int(4, 2**31 - 1)),
    "file.delete.delay.ms": ("file_delete_delay_ms", _int(0)),
    "preallocate": ("preallocate", _boolean),
    "unclean.leader.election.enable": ("unclean_leader_election_enable", _boolean),
    "message.downconversion.enable": ("message_downconversion_enable", _boolean),
    "message.format.version": ("message_format_version", _text),
    "message.timestamp.difference.max.ms": ("message_timestamp_difference_max_ms", _optional_int(0)),
    "compression.gzip.level": ("compression_gzip_level", _int(-1, 9)),
    "compression.lz4.level": ("compression_lz4_level", _int(1, 17)),
    "compression.zstd.level": ("compression_zstd_level", _int(-131072, 22)),
    "leader.replication.throttled.replicas": ("leader_replication_throttled_replicas", _text),
    "follower.replication.throttled.replicas": ("follower_replication_throttled_replicas", _text),
    "local.retention.ms": ("local_retention_ms", _int(-2)),
    "local.retention.bytes": ("local_retention_bytes", _int(-2)),
    "remote.storage.enable": ("remote_storage_enable", _boolean),
}
TOPIC_CONFIG_NAMES = tuple(_SPECS)
