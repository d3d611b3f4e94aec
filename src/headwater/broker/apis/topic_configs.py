"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: reading and changing topic configs.

A topic's effective config is Kafka's default, overlaid with the broker's defaults
(``headwater broker --log-config``), overlaid with the topic's own overrides; DescribeConfigs
names which of the three each value came from. Alterations are validated as a whole
before anything is applied: an unknown name or a bad value answers INVALID_CONFIG naming
it, and the topic keeps its old config.
"""
from __future__ import annotations

import logging

from headwater.log import LogConfig
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

log = logging.getLogger("headwater.broker")

DescribeConfigsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_CONFIGS][1]
AlterConfigsResponse = MESSAGE_CLASSES[ApiKey.ALTER_CONFIGS][1]
IncrementalAlterConfigsResponse = MESSAGE_CLASSES[ApiKey.INCREMENTAL_ALTER_CONFIGS][1]

TOPIC, BROKER, GROUP = 2, 4, 32  # config resource types
# Config sources, as numbered by the protocol.
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 1, 4, 5, 8
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3  # IncrementalAlterConfigs operations
# Config types (DescribeConfigs v3+): what a UI may offer as input.
BOOLEAN, STRING, INT, LONG, DOUBLE, LIST = 1, 2, 3, 5, 6, 7
CONFIG_TYPES = {"segment.bytes": INT, "index.interval.bytes": INT, "max.message.bytes": INT,
                "min.cleanable.dirty.ratio": DOUBLE, "cleanup.policy": LIST, "message.timestamp.type": STRING,
                "compression.type": STRING, "min.insync.replicas": INT, "segment.index.bytes": INT,
                "preallocate": BOOLEAN, "unclean.leader.election.enable": BOOLEAN,
                "message.downconversion.enable": BOOLEAN, "remote.storage.enable": BOOLEAN,
                "message.format.version": STRING, "compression.gzip.level": INT, "compression.lz4.level": INT,
                "compression.zstd.level": INT, "leader.replication.throttled.replicas": LIST,
                "follower.replication.throttled.replicas": LIST,
                "share.auto.offset.reset": STRING, "share.record.lock.duration.ms": INT,
                "share.delivery.count.limit": INT, "share.heartbeat.interval.ms": INT, "share.session.timeout.ms": INT,
                "share.isolation.level": STRING,
                "errors.deadletterqueue.topic.name": STRING, "errors.deadletterqueue.copy.record.enable": BOOLEAN}
LIST_CONFIGS = {name for name, kind in CONFIG_TYPES.items() if kind == LIST}
KAFKA_UNTHROTTLED = "1.7976931348623157E308"  # log.cleaner.io.max.bytes.per.second by default: Java's Double.MAX_VALUE


class ConfigError(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


def _topic(broker, resource_type: int, name: str):
    if resource_type != TOPIC:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"configs of resource type {resource_type} cannot be changed; "
                          "only topics (type 2) have configs to alter")
    topic = broker.log_manager.topics.get(name)
    if topic is None:
        raise ConfigError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return topic


# --- DescribeConfigs ---------------------------------------------------------------------

def _topic_entries(broker, topic) -> list[tuple[str, str | None, int, bool]]:
    """(name, value, source, read only) of every config of a topic."""
    broker_defaults = broker.config.topic_defaults
    entries = []
    for name, value in topic.config.to_topic_configs().items():
        if name in topic.configs:
            source = DYNAMIC_TOPIC_CONFIG
        elif name in broker_defaults:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        entries.append((name, value, source, False))
    return entries


def _broker_entries(broker) -> list[tuple[str, str | None, int, bool]]:
    """A few broker settings, read-only: a client asking about the broker gets an answer."""
    cfg = broker.config
    settings = {"broker.id": cfg.node_id, "message.max.bytes": cfg.message_max_bytes,
                "auto.create.topics.enable": str(cfg.auto_create_topics).lower(), "num.partitions": cfg.num_partitions,
                "log.retention.check.interval.ms": cfg.retention_check_interval_ms,
                "log.cleaner.backoff.ms": cfg.cleaner_interval_ms,
                "log.cleaner.io.max.bytes.per.second": (KAFKA_UNTHROTTLED if cfg.cleaner_io_max_bytes_per_second is None
                                                        else cfg.cleaner_io_max_bytes_per_second)}
    return [(name, str(value), STATIC_BROKER_CONFIG, True) for name, value in settings.items()]


def _describe_one(broker, resource, include_synonyms: bool):
    ResourceResult = DescribeConfigsResponse.DescribeConfigsResult
    ConfigEntry = ResourceResult.DescribeConfigsResourceResult
    Synonym = ConfigEntry.DescribeConfigsSynonym
    error, message, entries = ErrorCode.NONE, None, []
    if resource.resource_type == TOPIC:
        topic = broker.log_manager.topics.get(resource.resource_name)
        if topic is None:
            error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {resource.resource_name!r}"
        else:
            entries = _topic_entries(broker, topic)
    elif resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(broker.config.node_id)):
            error, message = ErrorCode.INVALID_REQUEST, f"no broker {resource.resource_name!r}: this is broker " \
                                                        f"{broker.config.node_id}"
        else:
            entries = _broker_entries(broker)
    elif resource.resource_type == GROUP:  # share-group configs (KIP-932)
        entries = [(name, value, GROUP_CONFIG if overridden else DEFAULT_CONFIG, False)
                   for name, value, overridden in broker.share.config_of(resource.resource_name).entries()]
    else:
        error, message = ErrorCode.INVALID_REQUEST, f"resource type {resource.resource_type} has no configs here"
    wanted = resource.configuration_keys
    configs = [ConfigEntry(name=name, value=value, read_only=read_only, config_source=source, is_sensitive=False,
                           synonyms=[Synonym(name=name, value=value, source=source)] if include_synonyms else [],
                           config_type=CONFIG_TYPES.get(name, LONG), documentation=None)
               for name, value, source, read_only in entries if wanted is None or name in wanted]
    return ResourceResult(error_code=error, error_message=message, resource_type=resource.resource_type,
                          resource_name=resource.resource_name, configs=configs)


async def describe_configs(broker, header, request):
    results = [_describe_one(broker, r, request.include_synonyms) for r in request.resources]
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


# --- AlterConfigs and IncrementalAlterConfigs -----------------------------------------------

def _incremental_overrides(topic, configs) -> dict[str, str | None]:
    """The topic's overrides after applying SET/DELETE/APPEND/SUBTRACT operations."""
    overrides = dict(topic.configs)
    effective = topic.config.to_topic_configs()
    for c in configs:
        if c.config_operation == SET and c.value is not None:
            overrides[c.name] = c.value
        elif c.config_operation in (SET, DELETE):  # SET to null: back to the default
            overrides.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in LIST_CONFIGS:
                operation = "APPEND" if c.config_operation == APPEND else "SUBTRACT"
                raise ConfigError(ErrorCode.INVALID_CONFIG, f"{operation} needs a list config, and {c.name!r} is not one")
            current = [v for v in overrides.get(c.name, effective[c.name]).split(",") if v]
            items = [v.strip() for v in (c.value or "").split(",") if v.strip()]
            if c.config_operation == APPEND:
                current += [v for v in items if v not in current]
            else:
                current = [v for v in current if v not in items]
            overrides[c.name] = ",".join(current)
        else:
            raise ConfigError(ErrorCode.INVALID_REQUEST,
                              f"unknown config operation {c.config_operation} for {c.name!r}")
    return overrides


def _alter_one(broker, resource, validate_only: bool, incremental: bool) -> tuple[ErrorCode, str | None]:
    if resource.resource_type == GROUP and incremental:  # share-group configs (KIP-932)
        try:
            broker.share.alter_configs(resource.resource_name, {c.name: c.value if c.config_operation == SET else None
                                                                for c in resource.configs}, validate_only)
        except ValueError as exc:
            return ErrorCode.INVALID_CONFIG, str(exc)
        return ErrorCode.NONE, None
    try:
        topic = _topic(broker, resource.resource_type, resource.resource_name)
        names = [c.name for c in resource.configs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(ErrorCode.INVALID_REQUEST, f"config {', '.join(duplicates)} given more than once")
        if incremental:
            overrides = _incremental_overrides(topic, resource.configs)
        else:
            overrides = {c.name: c.value for c in resource.configs if c.value is not None}
        try:
            LogConfig.from_topic_configs(overrides, broker.log_manager.defaults)
        except ValueError as exc:
            raise ConfigError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    except ConfigError as exc:
        return exc.error, str(exc)
    if not validate_only:
        broker.log_manager.alter_topic_configs(topic.name, overrides, incremental=False)
        log.info("topic %s configs now %s", topic.name, overrides or "the defaults")
    return ErrorCode.NONE, None


def _alter(broker, request, response_class, incremental: bool):
    ResourceResult = response_class.AlterConfigsResourceResponse
    responses = []
    for resource in request.resources:
        error, message = _alter_one(broker, resource, request.validate_only, incremental)
        responses.append(ResourceResult(error_code=error, error_message=message, resource_type=resource.resource_type,
                                        resource_name=resource.resource_name))
    return response_class(throttle_time_ms=0, responses=responses)


async def alter_configs(broker, header, request):
    return _alter(broker, request, AlterConfigsResponse, incremental=False)


async def incremental_alter_configs(broker, header, request):
    return _alter(broker, request, IncrementalAlterConfigsResponse, incremental=True)
