"""Metadata, CreateTopics, DeleteTopics: what topics exist and where their partitions live."""
from __future__ import annotations

import logging
import uuid

from headwater.broker.security.acl_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, authorized_operations
from headwater.broker.partition_apis import replica_assignment_error
from headwater.broker.config_apis import topic_entries
from headwater.broker.appender import CREATION_ERRORS, creation_error
from headwater.broker.security import connection
from headwater.log import UnknownTopicError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import TOPIC_DENIED, topic_check, topic_results

logger = logging.getLogger("headwater.broker")

MetadataResponse = MESSAGE_CLASSES[ApiKey.METADATA][1]
CreateTopicsResponse = MESSAGE_CLASSES[ApiKey.CREATE_TOPICS][1]
DeleteTopicsResponse = MESSAGE_CLASSES[ApiKey.DELETE_TOPICS][1]


def _topic_metadata(broker, name: str, error: ErrorCode, operations: set[int] | None):
    TopicMetadata = MetadataResponse.MetadataResponseTopic
    topic = broker.log_manager.topics.get(name)
    if topic is None:
        return TopicMetadata(error_code=error or ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                             topic_id=None, partitions=[], authorized_operations=operations)  # None: no topic ID
    node = broker.config.node_id
    PartitionMetadata = TopicMetadata.MetadataResponsePartition
    partitions = [PartitionMetadata(error_code=0, partition_index=i, leader_id=node, leader_epoch=0,
                                    replica_nodes=[node], isr_nodes=[node], offline_replicas=[])
                  for i in range(len(topic.partitions))]
    return TopicMetadata(error_code=0, name=name, is_internal=name.startswith("__"), topic_id=topic.topic_id,
                         partitions=partitions, authorized_operations=operations)


def _name_of(broker, topic_id: uuid.UUID) -> str:
    """A topic asked for by ID (Metadata v10+): its name, or '' for an unknown ID (answered as unknown)."""
    topic = broker.log_manager.topic_by_id(topic_id)
    return topic.name if topic is not None else ""


async def metadata(broker, header, request):
    # Before v4 every client expected auto-creation; from v4 the client says.
    allow_create = request.allow_auto_topic_creation if header.api_version >= 4 else True
    if request.topics is None:
        names = sorted(broker.log_manager.topics)
    else:
        names = [t.name if t.name is not None else _name_of(broker, t.topic_id) for t in request.topics]
    # KIP-430, from v8; from v11 the cluster's come from DescribeCluster instead
    topic_operations = authorized_operations(header.api_version >= 8 and request.include_topic_authorized_operations,
                                             TOPIC_OPERATIONS)
    cluster_asked = 8 <= header.api_version <= 10 and request.include_cluster_authorized_operations
    topics = []
    for name in names:
        error = ErrorCode.NONE
        if name not in broker.log_manager.topics and allow_create:
            try:
                broker.appender.topic_for_produce(name)
            except tuple(CREATION_ERRORS) as exc:
                error = creation_error(exc)
                logger.warning("cannot auto-create topic %r: %s", name, exc)
        topics.append(_topic_metadata(broker, name, error, topic_operations))
    cfg = broker.config
    host, port = connection.advertised(cfg)
    brokers = [MetadataResponse.MetadataResponseBroker(node_id=cfg.node_id, host=host, port=port, rack=None)]
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=cfg.node_id, topics=topics,
                            authorized_operations=authorized_operations(cluster_asked, CLUSTER_OPERATIONS))


async def create_topics(broker, header, request):
    TopicResult = CreateTopicsResponse.CreatableTopicResult
    results = []
    requested = sum(_partition_count(broker, t) for t in request.topics)
    limit = broker.config.max_partitions_per_request
    for t in request.topics:
        error, message = ErrorCode.NONE, None
        partitions = _partition_count(broker, t)
        wrong_assignment = _assignment_error(broker, t) if t.assignments else None
        configs = {c.name: c.value for c in t.configs}
        if requested > limit:  # as Kafka does, the whole request fails
            error, message = ErrorCode.POLICY_VIOLATION, (f"the request asks for {requested} partitions, more than "
                                                          f"{limit} (max.partitions.per.request)")
        elif t.replication_factor not in (-1, 1):
            error, message = ErrorCode.INVALID_REPLICATION_FACTOR, "a single Headwater broker keeps one replica"
        elif wrong_assignment:
            error, message = wrong_assignment
        elif partitions < 1:
            error, message = ErrorCode.INVALID_PARTITIONS, f"partition count must be at least 1, got {partitions}"
        elif t.name in broker.log_manager.topics:
            error, message = ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {t.name!r} already exists"
        else:
            try:
                if request.validate_only:  # the same checks as a create, answered the same
                    overrides, config = broker.log_manager.check_new_topic(t.name, partitions, configs)
                    topic_id = None
                else:
                    topic = broker.log_manager.create_topic(t.name, partitions, configs)
                    logger.info("created topic %s with %d partition(s) %s", t.name, partitions, configs or "")
                    overrides, config, topic_id = topic.configs, topic.config, topic.topic_id
                results.append(_created(t.name, partitions, topic_entries(broker, overrides, config), topic_id))
                continue
            except tuple(CREATION_ERRORS) as exc:
                error, message = creation_error(exc), str(exc)
                if error == ErrorCode.KAFKA_STORAGE_ERROR:
                    logger.warning("cannot create topic %s: %s", t.name, exc)
        results.append(TopicResult(name=t.name, error_code=error, error_message=message))
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _created(name: str, partitions: int, entries, topic_id):
    """A topic created (or that would be): v5+ answer its partitions and its configs as DescribeConfigs
    lists them, v7 its id."""
    TopicResult = CreateTopicsResponse.CreatableTopicResult
    configs = [TopicResult.CreatableTopicConfigs(name=n, value=value, read_only=read_only, config_source=source,
                                                 is_sensitive=False) for n, value, source, read_only in entries]
    return TopicResult(name=name, topic_id=topic_id, error_code=0, error_message=None, num_partitions=partitions,
                       replication_factor=1, configs=configs)


def _partition_count(broker, topic) -> int:
    if topic.assignments:
        return len(topic.assignments)
    return broker.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions


def _assignment_error(broker, topic) -> tuple[ErrorCode, str] | None:
    """A manual replica assignment is fine if it names this broker alone, partitions 0..n-1."""
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        return ErrorCode.INVALID_REQUEST, "give either a replica assignment or partitions and replication factor"
    wrong = replica_assignment_error(broker, [a.broker_ids for a in topic.assignments])
    if wrong:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, wrong
    if sorted(a.partition_index for a in topic.assignments) != list(range(len(topic.assignments))):
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "the assignment must name partitions 0 to n-1, each once"
    return None


async def delete_topics(broker, header, request):
    TopicResult = DeleteTopicsResponse.DeletableTopicResult
    results = []
    for name in request.topic_names:
        message = None
        try:
            broker.delete_topic(name)
            logger.info("deleted topic %s", name)
            error = ErrorCode.NONE
        except UnknownTopicError:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        except OSError as exc:  # nothing changed: the catalog is written first
            error, message = ErrorCode.KAFKA_STORAGE_ERROR, f"cannot delete topic {name!r}: {exc}"
            logger.warning("%s", message)
        results.append(TopicResult(name=name, error_code=error, error_message=message))
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)


async def metadata_rule(access, header, request, handle):
    """DESCRIBE on each topic: a topic asked for by name is answered with the denial, the others left out."""
    denied = []
    if request.topics:
        denied = [t.name for t in request.topics if t.name is not None and not access.topic(Op.DESCRIBE, t.name)]
        request.topics = [t for t in request.topics if t.name not in denied]
        if not request.topics and denied:  # an empty list would mean "all topics"
            request.topics = None
            response = await handle(request)
            response.topics = []
        else:
            response = await handle(request)
    else:
        response = await handle(request)
    Topic = type(response).MetadataResponseTopic
    response.topics = [t for t in response.topics if access.topic(Op.DESCRIBE, t.name)] + [
        Topic(name=name, error_code=TOPIC_DENIED) for name in denied]
    return response


def _may_create(access, topic) -> ErrorCode | None:
    """CREATE on the cluster, or else on the topic (as Kafka)."""
    return None if access.cluster(Op.CREATE) or access.topic(Op.CREATE, topic.name) else TOPIC_DENIED


create_topics_rule = topic_results(_may_create, "topics", "topics", CreateTopicsResponse.CreatableTopicResult)
delete_topics_rule = topic_results(topic_check(Op.DELETE, lambda name: name), "topic_names", "responses",
                                   DeleteTopicsResponse.DeletableTopicResult, name_of=lambda name: name)
