"""DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets: a share group's
start offsets as an operator sees and moves them (``kafka-share-groups --describe``,
``--reset-offsets``, ``--delete-offsets``). Moving or forgetting them needs an empty group."""
from __future__ import annotations

from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_messages import (AlterShareGroupOffsetsResponse, DeleteShareGroupOffsetsResponse,
                                               DescribeShareGroupOffsetsResponse)
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (GROUP_DENIED, NOT_AUTHORIZED, TOPIC_DENIED, empty_response, group,
                                                     partition_answers, partition_results, per_resource, take_denied,
                                                     topic_check)

from .coordinator import ShareError

NO_OFFSET = -1     # a partition the group has no delivery state for yet


async def describe_share_group_offsets(broker, header, request):
    return DescribeShareGroupOffsetsResponse(throttle_time_ms=0, groups=[_described(broker, g) for g in request.groups])


def _described(broker, asked):
    Group = DescribeShareGroupOffsetsResponse.DescribeShareGroupOffsetsResponseGroup
    Topic = Group.DescribeShareGroupOffsetsResponseTopic
    Partition = Topic.DescribeShareGroupOffsetsResponsePartition
    try:
        states = broker.share.states(asked.group_id)
    except ShareError as exc:
        return Group(group_id=asked.group_id, topics=[], error_code=exc.code, error_message=str(exc))
    wanted = sorted(states) if asked.topics is None else [(t.topic_name, p) for t in asked.topics for p in t.partitions]
    by_topic: dict[str, list] = {}
    for topic, partition in wanted:
        plog = broker.log_manager.get_log(topic, partition)
        state = states.get((topic, partition))
        if plog is None:
            answer = Partition(partition_index=partition, start_offset=NO_OFFSET, leader_epoch=-1, lag=NO_OFFSET,
                               error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"no {topic}-{partition}")
        else:
            answer = Partition(partition_index=partition, leader_epoch=0, error_code=0, error_message=None,
                               start_offset=NO_OFFSET if state is None else state.start_offset,
                               lag=NO_OFFSET if state is None else state.lag(plog.log_end_offset))
        by_topic.setdefault(topic, []).append(answer)
    return Group(group_id=asked.group_id, error_code=0, error_message=None, topics=[
        Topic(topic_name=t, topic_id=_topic_id(broker, t), partitions=ps)
        for t, ps in by_topic.items()])


async def alter_share_group_offsets(broker, header, request):
    Topic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
    Partition = Topic.AlterShareGroupOffsetsResponsePartition
    errors = {(t.topic_name, p.partition_index): _bad_offset(broker, t.topic_name, p.partition_index, p.start_offset)
              for t in request.topics for p in t.partitions}
    try:
        broker.share.move_start_offsets(request.group_id, {
            (t.topic_name, p.partition_index): p.start_offset for t in request.topics for p in t.partitions
            if errors[(t.topic_name, p.partition_index)] is None})
    except ShareError as exc:
        return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=exc.code, error_message=str(exc),
                                              responses=[])
    return AlterShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        Topic(topic_name=t.topic_name, topic_id=_topic_id(broker, t.topic_name),
              partitions=[Partition(partition_index=p.partition_index,
                                    **_error(errors[(t.topic_name, p.partition_index)])) for p in t.partitions])
        for t in request.topics])


def _bad_offset(broker, topic: str, partition: int, offset: int) -> tuple[ErrorCode, str] | None:
    if broker.log_manager.get_log(topic, partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no {topic}-{partition}"
    if offset < 0:
        return ErrorCode.INVALID_REQUEST, f"start offset {offset} is negative"
    return None


def _error(error: tuple[ErrorCode, str] | None) -> dict:
    code, message = error or (ErrorCode.NONE, None)
    return {"error_code": code, "error_message": message}


async def delete_share_group_offsets(broker, header, request):
    Topic = DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic
    known = {t.topic_name for t in request.topics if t.topic_name in broker.log_manager.topics}
    try:
        broker.share.delete_start_offsets(request.group_id, known)
    except ShareError as exc:
        return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=exc.code, error_message=str(exc),
                                               responses=[])
    return DeleteShareGroupOffsetsResponse(throttle_time_ms=0, error_code=0, error_message=None, responses=[
        Topic(topic_name=t.topic_name, topic_id=_topic_id(broker, t.topic_name),
              **_error(None if t.topic_name in known
                       else (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {t.topic_name!r}")))
        for t in request.topics])


def _topic_id(broker, name: str):
    topic = broker.log_manager.topics.get(name)
    return None if topic is None else topic.topic_id     # None: the zero UUID


async def describe_share_group_offsets_rule(access, header, request, handle):
    """DESCRIBE on each group, and on each topic named (all topics asked for: those without it left out)."""
    denied_groups = take_denied(request, "groups", lambda g: access.group(Op.DESCRIBE, g.group_id))
    denied_topics = {g.group_id: take_denied(g, "topics", lambda t: access.topic(Op.DESCRIBE, t.topic_name))
                     for g in request.groups if g.topics is not None}
    response = await handle(request) if request.groups else empty_response(header)
    Group = type(response).DescribeShareGroupOffsetsResponseGroup
    Topic = Group.DescribeShareGroupOffsetsResponseTopic
    for group_ in response.groups:
        group_.topics = [t for t in group_.topics if access.topic(Op.DESCRIBE, t.topic_name)] + [
            Topic(topic_name=t.topic_name, partitions=partition_answers(
                Topic.DescribeShareGroupOffsetsResponsePartition, "partition_index", t.partitions, start_offset=-1,
                leader_epoch=-1, lag=-1, error_code=TOPIC_DENIED, error_message=NOT_AUTHORIZED))
            for t in denied_topics.get(group_.group_id, [])]
    response.groups += [Group(group_id=g.group_id, topics=[], error_code=GROUP_DENIED, error_message=NOT_AUTHORIZED)
                        for g in denied_groups]
    return response


_AlterTopic = AlterShareGroupOffsetsResponse.AlterShareGroupOffsetsResponseTopic
alter_share_group_offsets_rule = group(Op.READ, partition_results(
    topic_check(Op.READ, lambda t: t.topic_name), _AlterTopic, _AlterTopic.AlterShareGroupOffsetsResponsePartition,
    answers="responses", name="topic_name", error_message=NOT_AUTHORIZED))
delete_share_group_offsets_rule = group(Op.DELETE, per_resource(
    "topics", topic_check(Op.READ, lambda t: t.topic_name), "responses",
    lambda t, code: DeleteShareGroupOffsetsResponse.DeleteShareGroupOffsetsResponseTopic(
        topic_name=t.topic_name, error_code=code, error_message=NOT_AUTHORIZED)))
