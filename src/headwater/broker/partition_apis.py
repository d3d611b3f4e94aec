"""CreatePartitions and DescribeTopicPartitions: growing a topic, describing its partitions.

One broker holds every partition, so a manual assignment may name broker 0 only, and every
partition's leader, replica set and ISR is that broker.
"""
from __future__ import annotations

import logging
import uuid

from headwater.broker.security.acl_operations import TOPIC_OPERATIONS, bit_field
from headwater.broker.appender import CREATION_ERRORS, creation_error
from headwater.log import PartitionCountError, UnknownTopicError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import per_resource, topic_check, topic_results, visible

logger = logging.getLogger("headwater.broker")

CreatePartitionsResponse = MESSAGE_CLASSES[ApiKey.CREATE_PARTITIONS][1]
DescribeTopicPartitionsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_TOPIC_PARTITIONS][1]


def replica_assignment_error(broker, assignment: list[list[int]]) -> str | None:
    """Why a manual replica assignment cannot be honoured, if it cannot: one replica per
    partition, on this broker."""
    foreign = {b for replicas in assignment for b in replicas} - {broker.config.node_id}
    if foreign or any(len(replicas) != 1 for replicas in assignment):
        return (f"unknown broker(s) {sorted(foreign)}: " if foreign else "") + \
            f"this cluster is one broker, {broker.config.node_id}, holding one replica of each partition"
    return None


def _assignment_error(broker, assignments, added: int) -> str | None:
    if assignments is None or added <= 0:  # no assignment, or a count the log manager refuses
        return None
    if len(assignments) != added:
        return f"{len(assignments)} replica assignment(s) given for {added} new partition(s)"
    return replica_assignment_error(broker, [a.broker_ids for a in assignments])


async def create_partitions(broker, header, request):
    Result = CreatePartitionsResponse.CreatePartitionsTopicResult
    results = []
    for t in request.topics:
        error, message = ErrorCode.NONE, None
        topic = broker.log_manager.topics.get(t.name)
        wrong = _assignment_error(broker, t.assignments, t.count - len(topic.partitions)) if topic else None
        if wrong:
            error, message = ErrorCode.INVALID_REPLICA_ASSIGNMENT, wrong
        else:
            try:
                broker.log_manager.add_partitions(t.name, t.count, validate_only=request.validate_only)
                if not request.validate_only:
                    logger.info("topic %s now has %d partitions", t.name, t.count)
            except UnknownTopicError as exc:
                error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, str(exc)
            except PartitionCountError as exc:
                error, message = ErrorCode.INVALID_PARTITIONS, str(exc)
            except tuple(CREATION_ERRORS) as exc:
                error, message = creation_error(exc), str(exc)
        results.append(Result(name=t.name, error_code=error, error_message=message))
    return CreatePartitionsResponse(throttle_time_ms=0, results=results)


async def describe_topic_partitions(broker, header, request):
    """Every partition of the named topics (all topics if none named), from the cursor on."""
    Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
    Partition = Topic.DescribeTopicPartitionsResponsePartition
    node = broker.config.node_id
    names = sorted(t.name for t in request.topics) if request.topics else sorted(broker.log_manager.topics)
    cursor = request.cursor
    start = (cursor.topic_name, cursor.partition_index) if cursor else ("", 0)
    budget, topics, next_cursor = request.response_partition_limit, [], None
    for name in (n for n in names if n >= start[0]):
        found = broker.log_manager.topics.get(name)
        if found is None:
            topics.append(Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                                partitions=[], topic_authorized_operations=-(1 << 31)))
            continue
        first = start[1] if name == start[0] else 0
        partitions = []
        for index in range(first, len(found.partitions)):
            if budget == 0:
                next_cursor = DescribeTopicPartitionsResponse.Cursor(topic_name=name, partition_index=index)
                break
            budget -= 1
            # Empty ELR lists, not null: Kafka's Admin client streams over them (a null is its NPE).
            partitions.append(Partition(error_code=0, partition_index=index, leader_id=node, leader_epoch=0,
                                        replica_nodes=[node], isr_nodes=[node], eligible_leader_replicas=[],
                                        last_known_elr=[], offline_replicas=[]))
        topics.append(Topic(error_code=0, name=name, topic_id=found.topic_id, is_internal=name.startswith("__"), partitions=partitions,
                            topic_authorized_operations=bit_field(TOPIC_OPERATIONS)))
        if next_cursor:
            break
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


async def describe_topic_partitions_rule(access, header, request, handle):
    """DESCRIBE on each topic: topics named are each answered with the denial; none named means all, filtered."""
    if request.topics:
        Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
        rule = per_resource("topics", topic_check(Op.DESCRIBE), "topics", lambda t, code: Topic(
            error_code=code, name=t.name, topic_id=uuid.UUID(int=0), partitions=[]))
    else:
        rule = visible("topics", lambda a, t: a.topic(Op.DESCRIBE, t.name))
    return await rule(access, header, request, handle)


create_partitions_rule = topic_results(topic_check(Op.ALTER), "topics", "results",
                                       CreatePartitionsResponse.CreatePartitionsTopicResult)
