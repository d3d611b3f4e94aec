"""DescribeConfigs, AlterConfigs, IncrementalAlterConfigs: reading and changing topic and broker configs.

A topic's effective config is Kafka's default, overlaid with the broker's defaults
(``headwater broker --log-config``), then the dynamic broker configs (``dynamic_config``: the
cluster-wide default, then this broker's), then the topic's own overrides; DescribeConfigs
names which each value came from. Alterations are validated as a whole before anything is
applied: on a topic an unknown name or a bad value answers INVALID_CONFIG naming it; on the
broker, as Kafka, INVALID_REQUEST (a read-only name: "Cannot update these configs
dynamically"); either way nothing changes.
"""
from __future__ import annotations

import logging

from headwater.broker.dynamic_config import (BROKER_LEVEL, BROKER_SYNONYMS, DEFAULT_LEVEL, TOPIC_CONFIG_SYNONYMS)
from headwater.log import LogConfig
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (CLUSTER_DENIED, GROUP_DENIED, NOT_AUTHORIZED, TOPIC_DENIED, Check,
                                                     Rule, per_resource)

logger = logging.getLogger("headwater.broker")

DescribeConfigsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_CONFIGS][1]
AlterConfigsResponse = MESSAGE_CLASSES[ApiKey.ALTER_CONFIGS][1]
IncrementalAlterConfigsResponse = MESSAGE_CLASSES[ApiKey.INCREMENTAL_ALTER_CONFIGS][1]

TOPIC, BROKER, GROUP = 2, 4, 32  # config resource types
# Config sources, as numbered by the protocol.
DYNAMIC_TOPIC_CONFIG, DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 1, 2, 3
STATIC_BROKER_CONFIG, DEFAULT_CONFIG, GROUP_CONFIG = 4, 5, 8
LEVEL_SOURCES = {BROKER_LEVEL: DYNAMIC_BROKER_CONFIG, DEFAULT_LEVEL: DYNAMIC_DEFAULT_BROKER_CONFIG}
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
BROKER_LIST_CONFIGS = {name for name, topic_name in TOPIC_CONFIG_SYNONYMS.items() if topic_name in LIST_CONFIGS}
KAFKA_UNTHROTTLED = "1.7976931348623157E308"  # log.cleaner.io.max.bytes.per.second by default: Java's Double.MAX_VALUE


class ConfigError(Exception):
    def __init__(self, error: ErrorCode, message: str):
        super().__init__(message)
        self.error = error


def _topic(broker, resource_type: int, name: str):
    if resource_type != TOPIC:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"configs of resource type {resource_type} cannot be changed; "
                          "only topics (type 2) and brokers (type 4) have configs to alter")
    topic = broker.log_manager.topics.get(name)
    if topic is None:
        raise ConfigError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return topic


# --- DescribeConfigs ---------------------------------------------------------------------

def _default_source(broker, topic_config: str) -> int:
    """Where the broker's default of a topic config comes from."""
    level = broker.dynamic_configs.source_level(BROKER_SYNONYMS.get(topic_config, ""))
    if level is not None:
        return LEVEL_SOURCES[level]
    return STATIC_BROKER_CONFIG if topic_config in broker.config.topic_defaults else DEFAULT_CONFIG


def topic_entries(broker, overrides: dict[str, str], config: LogConfig) -> list[tuple[str, str | None, int, bool]]:
    """(name, value, source, read only) of every config of a topic with these overrides and effective config."""
    return [(name, value, DYNAMIC_TOPIC_CONFIG if name in overrides else _default_source(broker, name), False)
            for name, value in config.to_topic_configs().items()]


def _broker_entries(broker) -> list[tuple[str, str | None, int, bool]]:
    """The broker's settings: those fixed at start-up read-only, then the topic defaults AlterConfigs may change."""
    cfg = broker.config
    settings = {"broker.id": cfg.node_id, "message.max.bytes": cfg.message_max_bytes,
                "auto.create.topics.enable": str(cfg.auto_create_topics).lower(), "num.partitions": cfg.num_partitions,
                "log.retention.check.interval.ms": cfg.retention_check_interval_ms,
                "log.flush.offset.checkpoint.interval.ms": cfg.flush_offset_checkpoint_interval_ms,
                "log.cleaner.backoff.ms": cfg.cleaner_interval_ms,
                "log.cleaner.io.max.bytes.per.second": (KAFKA_UNTHROTTLED if cfg.cleaner_io_max_bytes_per_second is None
                                                        else cfg.cleaner_io_max_bytes_per_second),
                "group.initial.rebalance.delay.ms": cfg.group_initial_rebalance_delay_ms}
    defaults = broker.log_manager.defaults.to_topic_configs()
    return ([(name, str(value), STATIC_BROKER_CONFIG, True) for name, value in settings.items()]
            + [(name, defaults[topic_name], _default_source(broker, topic_name), False)
               for name, topic_name in TOPIC_CONFIG_SYNONYMS.items()])


def _broker_level(broker, name: str) -> str:
    """The dynamic level a broker resource names: this broker's id, or empty for the cluster-wide default."""
    if name == "":
        return DEFAULT_LEVEL
    if name == str(broker.config.node_id):
        return BROKER_LEVEL
    raise ConfigError(ErrorCode.INVALID_REQUEST, f"no broker {name!r}: this is broker {broker.config.node_id}")


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
            entries = topic_entries(broker, topic.configs, topic.config)
    elif resource.resource_type == BROKER:
        try:
            level = _broker_level(broker, resource.resource_name)
        except ConfigError as exc:
            error, message = exc.error, str(exc)
        else:  # as Kafka: the cluster-wide default resource shows only what is set on it
            entries = _broker_entries(broker) if level == BROKER_LEVEL else [
                (name, value, DYNAMIC_DEFAULT_BROKER_CONFIG, False)
                for name, value in broker.dynamic_configs.levels[DEFAULT_LEVEL].items()]
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

def _incremental_overrides(current: dict[str, str], effective: dict[str, str], configs,
                           list_configs: set[str]) -> dict[str, str]:
    """``current`` (a topic's overrides, a broker level's configs) after SET/DELETE/APPEND/SUBTRACT;
    APPEND and SUBTRACT start from ``effective`` where ``current`` does not set the config."""
    overrides = dict(current)
    for c in configs:
        if c.config_operation == SET and c.value is not None:
            overrides[c.name] = c.value
        elif c.config_operation in (SET, DELETE):  # SET to null: back to the default
            overrides.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if c.name not in list_configs:
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
        names = [c.name for c in resource.configs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ConfigError(ErrorCode.INVALID_REQUEST, f"config {', '.join(duplicates)} given more than once")
        alter = _alter_broker if resource.resource_type == BROKER else _alter_topic
        alter(broker, resource, validate_only, incremental)
    except ConfigError as exc:
        return exc.error, str(exc)
    return ErrorCode.NONE, None


def _new_configs(current: dict[str, str], effective: dict[str, str], resource, incremental: bool,
                 list_configs: set[str]) -> dict[str, str]:
    """What a resource's configs become: AlterConfigs replaces them all, IncrementalAlterConfigs edits them."""
    if incremental:
        return _incremental_overrides(current, effective, resource.configs, list_configs)
    return {c.name: c.value for c in resource.configs if c.value is not None}


def _alter_topic(broker, resource, validate_only: bool, incremental: bool) -> None:
    topic = _topic(broker, resource.resource_type, resource.resource_name)
    overrides = _new_configs(topic.configs, topic.config.to_topic_configs(), resource, incremental, LIST_CONFIGS)
    try:
        LogConfig.from_topic_configs(overrides, broker.log_manager.defaults)
    except ValueError as exc:
        raise ConfigError(ErrorCode.INVALID_CONFIG, str(exc)) from None
    if not validate_only:
        broker.log_manager.alter_topic_configs(topic.name, overrides, incremental=False)
        logger.info("topic %s configs now %s", topic.name, overrides or "the defaults")


def _alter_broker(broker, resource, validate_only: bool, incremental: bool) -> None:
    level = _broker_level(broker, resource.resource_name)
    defaults = broker.log_manager.defaults.to_topic_configs()
    effective = {name: defaults[topic_name] for name, topic_name in TOPIC_CONFIG_SYNONYMS.items()}
    configs = _new_configs(broker.dynamic_configs.levels[level], effective, resource, incremental,
                           BROKER_LIST_CONFIGS)
    try:
        new_defaults = broker.dynamic_configs.topic_defaults(broker.static_log_defaults, (level, configs))
    except ValueError as exc:
        raise ConfigError(ErrorCode.INVALID_REQUEST, f"Invalid config value for broker resource "
                                                     f"{resource.resource_name!r}: {exc}") from None
    if not validate_only:
        broker.dynamic_configs.replace(level, configs)
        broker.log_manager.set_defaults(new_defaults)
        logger.info("dynamic broker configs (%s) now %s", level, configs or "none")


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


def _may_configure(operation: Op) -> Check:
    """Each resource needs ``operation`` on its topic, its group, or else the cluster."""
    def check(access, resource) -> ErrorCode | None:
        if resource.resource_type == TOPIC:
            return None if access.topic(operation, resource.resource_name) else TOPIC_DENIED
        if resource.resource_type == GROUP:
            return None if access.group(operation, resource.resource_name) else GROUP_DENIED
        return None if access.cluster(operation) else CLUSTER_DENIED
    return check


def _configs_rule(operation: Op, answers: str, result: type, **empty) -> Rule:
    return per_resource("resources", _may_configure(operation), answers, lambda r, code: result(
        error_code=code, error_message=NOT_AUTHORIZED, resource_type=r.resource_type,
        resource_name=r.resource_name, **empty))


describe_configs_rule = _configs_rule(Op.DESCRIBE_CONFIGS, "results", DescribeConfigsResponse.DescribeConfigsResult,
                                      configs=[])
alter_configs_rule = _configs_rule(Op.ALTER_CONFIGS, "responses", AlterConfigsResponse.AlterConfigsResourceResponse)
incremental_alter_configs_rule = _configs_rule(Op.ALTER_CONFIGS, "responses",
                                               IncrementalAlterConfigsResponse.AlterConfigsResourceResponse)
