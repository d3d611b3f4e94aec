"""Metadata, CreateTopics, DeleteTopics: what topics exist and where their partitions live."""
from __future__ import annotations

import logging

from headwater.broker.handlers import handles
from headwater.log import InvalidTopicError, TopicExistsError, UnknownTopicError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

log = logging.getLogger("headwater.broker")

MetadataResponse = MESSAGE_CLASSES[ApiKey.METADATA][1]
CreateTopicsResponse = MESSAGE_CLASSES[ApiKey.CREATE_TOPICS][1]
DeleteTopicsResponse = MESSAGE_CLASSES[ApiKey.DELETE_TOPICS][1]


def _topic_metadata(broker, name: str, error: ErrorCode = ErrorCode.NONE):
    T = MetadataResponse.MetadataResponseTopic
    topic = broker.logs.topics.get(name)
    if topic is None:
        return T(error_code=error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False, partitions=[])
    node = broker.config.node_id
    partitions = [T.MetadataResponsePartition(error_code=0, partition_index=i, leader_id=node, leader_epoch=0,
                                              replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                  for i in range(len(topic.partitions))]
    return T(error_code=0, name=name, is_internal=name.startswith("__"), partitions=partitions)


@handles(ApiKey.METADATA, 1, 8)
async def metadata(broker, header, request):
    # Before v4 every client expected auto-creation; from v4 the client says.
    allow_create = request.allow_auto_topic_creation if header.api_version >= 4 else True
    if request.topics is None:
        names = sorted(broker.logs.topics)
    else:
        names = [t.name for t in request.topics]
    topics = []
    for name in names:
        error = ErrorCode.NONE
        if name not in broker.logs.topics and allow_create:
            try:
                broker.topic_for_produce(name)
            except InvalidTopicError:
                error = ErrorCode.INVALID_TOPIC_EXCEPTION
        topics.append(_topic_metadata(broker, name, error))
    cfg = broker.config
    host, port = cfg.advertised
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=cfg.node_id, host=host, port=port, rack=None)]
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=cfg.node_id, topics=topics)


@handles(ApiKey.CREATE_TOPICS, 2, 4)
async def create_topics(broker, header, request):
    R = CreateTopicsResponse.CreatableTopicResult
    results = []
    for t in request.topics:
        error, message = ErrorCode.NONE, None
        partitions = broker.config.num_partitions if t.num_partitions == -1 else t.num_partitions
        configs = {c.name: c.value for c in t.configs}
        if t.replication_factor not in (-1, 1):
            error, message = ErrorCode.INVALID_REPLICATION_FACTOR, "a single Headwater broker keeps one replica"
        elif t.assignments:
            error, message = ErrorCode.INVALID_REQUEST, "manual replica assignment is not supported"
        elif partitions < 1:
            error, message = ErrorCode.INVALID_PARTITIONS, f"partition count must be at least 1, got {partitions}"
        elif t.name in broker.logs.topics:
            error, message = ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"
        elif not request.validate_only:
            try:
                broker.logs.create_topic(t.name, partitions, configs)
                log.info("created topic %s with %d partition(s) %s", t.name, partitions, configs or "")
            except InvalidTopicError as exc:
                error, message = ErrorCode.INVALID_TOPIC_EXCEPTION, str(exc)
            except TopicExistsError as exc:
                error, message = ErrorCode.TOPIC_ALREADY_EXISTS, str(exc)
            except ValueError as exc:
                error, message = ErrorCode.INVALID_CONFIG, str(exc)
        results.append(R(name=t.name, error_code=error, error_message=message))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


@handles(ApiKey.DELETE_TOPICS, 0, 3)
async def delete_topics(broker, header, request):
    R = DeleteTopicsResponse.DeletableTopicResult
    results = []
    for name in request.topic_names:
        try:
            broker.delete_topic(name)
            log.info("deleted topic %s", name)
            error = ErrorCode.NONE
        except UnknownTopicError:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        results.append(R(name=name, error_code=error))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
