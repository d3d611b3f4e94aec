"""The source and sink options, named and interpreted as Spark's Kafka connector does."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from headwater.protocol.request import UnsupportedSecurity, security_properties

# Offsets in a spec or a checkpoint: {"topic": {"0": 42}}; -2 means earliest, -1 latest
# (the same sentinels the Kafka source uses in startingOffsets/endingOffsets JSON).
EARLIEST = -2
LATEST = -1

# Every "kafka.*" option is a client setting in librdkafka's names, without the prefix: the
# planner and the sink hand them to librdkafka, the partition reader's fetcher takes the
# ones it knows (headwater.spark.fetcher).
CLIENT_PREFIX = "kafka."


class OptionError(ValueError):
    """An option is missing, unknown in value, or contradicts another one."""


@dataclass(frozen=True)
class Subscription:
    """Which topic-partitions to read: exactly one of the three Kafka strategies."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assigned:
            return any(t == topic for t, _ in self.assigned)
        return topic in self.topics


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: "earliest", "latest", per-partition offsets, or timestamps."""

    kind: str  # "earliest" | "latest" | "offsets" | "timestamp"
    offsets: dict = field(default_factory=dict)  # {topic: {partition: offset}} for "offsets"
    timestamp_ms: int | None = None  # one timestamp for all partitions


@dataclass(frozen=True)
class ReaderOptions:
    client: dict
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool


# Client settings the source manages itself, refused as Spark's Kafka source refuses them: a
# user's auto.offset.reset would skip lost records silently instead of failOnDataLoss deciding.
MANAGED = {"auto.offset.reset": "set startingOffsets instead (failOnDataLoss decides what lost offsets do)",
           "enable.auto.commit": "the query keeps its offsets in its checkpoint"}


def client_config(options) -> dict:
    """The librdkafka settings: every `kafka.*` option with the prefix removed."""
    config = {k[len(CLIENT_PREFIX):]: v for k, v in options.items() if k.lower().startswith(CLIENT_PREFIX)}
    if "bootstrap.servers" not in config:
        raise OptionError("option 'kafka.bootstrap.servers' is required (e.g. 127.0.0.1:9092)")
    for name, instead in MANAGED.items():
        if name in config:
            raise OptionError(f"option 'kafka.{name}' is not supported: {instead}")
    return config


def _bool(options, name: str, default: bool) -> bool:
    raw = options.get(name)
    if raw is None:
        return default
    if str(raw).lower() not in ("true", "false"):
        raise OptionError(f"option '{name}' must be true or false, got {raw!r}")
    return str(raw).lower() == "true"


def _subscription(options) -> Subscription:
    given = [name for name in ("subscribe", "subscribePattern", "assign") if options.get(name)]
    if len(given) != 1:
        raise OptionError("exactly one of the options 'subscribe', 'subscribePattern', 'assign' must be set"
                          + (f" (got {', '.join(given)})" if given else ""))
    if options.get("subscribe"):
        topics = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not topics:
            raise OptionError("option 'subscribe' names no topic")
        return Subscription(topics=topics)
    if options.get("subscribePattern"):
        try:
            re.compile(options["subscribePattern"])
        except re.error as e:
            raise OptionError(f"option 'subscribePattern' is not a regular expression: {e}") from None
        return Subscription(pattern=options["subscribePattern"])
    parsed = _json(options, "assign")
    try:
        assigned = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
    except (AttributeError, TypeError, ValueError):
        raise OptionError('option \'assign\' must look like {"topic": [0, 1]}') from None
    return Subscription(assigned=assigned)


def _json(options, name: str):
    try:
        return json.loads(options[name])
    except json.JSONDecodeError as e:
        raise OptionError(f"option '{name}' is not valid JSON: {e}") from None


def _offset_spec(options, name: str, default: str, allow_latest: bool = True, allow_earliest: bool = True) -> OffsetSpec:
    raw = options.get(name)
    timestamp = options.get(name.replace("Offsets", "Timestamp"))
    if timestamp is not None:
        try:
            return OffsetSpec("timestamp", timestamp_ms=int(timestamp))
        except ValueError:
            raise OptionError(f"option '{name.replace('Offsets', 'Timestamp')}' must be milliseconds since the epoch") from None
    raw = (raw or default).strip()
    if raw.lower() == "earliest" and allow_earliest:
        return OffsetSpec("earliest")
    if raw.lower() == "latest" and allow_latest:
        return OffsetSpec("latest")
    if not raw.startswith("{"):
        allowed = [w for w, ok in (("earliest", allow_earliest), ("latest", allow_latest)) if ok]
        raise OptionError(f"option '{name}' must be {' or '.join(allowed)} or JSON offsets, got {raw!r}")
    parsed = _json({name: raw}, name)
    try:
        offsets = {str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in parsed.items()}
    except (AttributeError, TypeError, ValueError):
        raise OptionError(f'option \'{name}\' must look like {{"topic": {{"0": 42}}}}') from None
    return OffsetSpec("offsets", offsets=offsets)


def reader_options(options, streaming: bool) -> ReaderOptions:
    limit = options.get("maxOffsetsPerTrigger")
    if limit is not None:
        try:
            limit = int(limit)
        except ValueError:
            limit = 0
        if limit <= 0:
            raise OptionError(f"option 'maxOffsetsPerTrigger' must be a positive integer, got {options.get('maxOffsetsPerTrigger')!r}")
    if streaming and options.get("endingOffsets"):
        raise OptionError("option 'endingOffsets' is for batch queries only")
    client = client_config(options)
    try:
        security_properties(client)
    except UnsupportedSecurity as e:  # found on the driver, before any task fails on it
        raise OptionError(f"the source's reader cannot honour these options: {e}") from None
    return ReaderOptions(
        client=client,
        subscription=_subscription(options),
        # Streaming queries start at the end by default, batch queries at the beginning.
        starting=_offset_spec(options, "startingOffsets", "latest" if streaming else "earliest",
                              allow_latest=streaming),
        ending=_offset_spec(options, "endingOffsets", "latest", allow_earliest=False),
        max_offsets_per_trigger=limit,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        include_headers=_bool(options, "includeHeaders", False),
    )
