"""ConsumerGroupHeartbeat, ConsumerGroupDescribe: the consumer group protocol's (KIP-848) API handlers.

On the wire partitions go by topic ID; the state machine (``consumer_group``) works with names.
"""
from __future__ import annotations

from headwater.broker.security.acl_operations import GROUP_OPERATIONS, bit_field
from headwater.broker.endpoint import client_host
from headwater.protocol.consumer_group_messages import ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatResponse
from headwater.protocol.errors import ErrorCode

from .assignors import Partitions
from .consumer_group import ConsumerGroupError, HeartbeatRequest

CONSUMER_MEMBER = 1   # ConsumerGroupDescribe v1 MemberType (KIP-1099): 0 classic, 1 consumer
NOT_ASKED = -2147483648


def _by_topic(broker, partitions: Partitions, cls, with_names: bool) -> list:
    """Partitions as the messages' [TopicId, (TopicName,) Partitions], topics the broker no longer has left out."""
    topics = broker.log_manager.topics
    by_name: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        if topic in topics:
            by_name.setdefault(topic, []).append(partition)
    return [cls(topic_id=topics[name].topic_id, partitions=ps, **({"topic_name": name} if with_names else {}))
            for name, ps in by_name.items()]


def _owned(broker, topic_partitions) -> Partitions | None:
    if topic_partitions is None:
        return None
    owned = set()
    for t in topic_partitions:
        topic = broker.log_manager.topic_by_id(t.topic_id)
        if topic is not None:  # a deleted topic's partitions are owned by nobody any more
            owned.update((topic.name, p) for p in t.partitions)
    return frozenset(owned)


async def consumer_group_heartbeat(broker, header, request):
    Response = ConsumerGroupHeartbeatResponse
    try:
        if header.api_version >= 1 and not request.member_id:
            raise ConsumerGroupError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
        result = await broker.consumer_groups.answer(HeartbeatRequest(
            group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
            client_id=header.client_id or "", client_host=client_host.get(), instance_id=request.instance_id,
            rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=request.subscribed_topic_names,
            subscribed_topic_regex=request.subscribed_topic_regex, server_assignor=request.server_assignor,
            owned=_owned(broker, request.topic_partitions)))
    except ConsumerGroupError as exc:
        return Response(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), member_id=None,
                        member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    assignment = None
    if result.assignment is not None:
        assignment = Response.Assignment(topic_partitions=_by_topic(
            broker, result.assignment, Response.Assignment.TopicPartitions, with_names=False))
    return Response(throttle_time_ms=0, error_code=0, error_message=None, member_id=result.member_id,
                    member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms,
                    assignment=assignment)


async def consumer_group_describe(broker, header, request):
    Described = ConsumerGroupDescribeResponse.DescribedGroup
    Member = Described.Member
    Assignment = Member.Assignment
    operations = bit_field(GROUP_OPERATIONS) if request.include_authorized_operations else NOT_ASKED

    def assignment(partitions: Partitions):
        return Assignment(topic_partitions=_by_topic(broker, partitions, Assignment.TopicPartitions, with_names=True))

    groups = []
    for group_id in request.group_ids:
        group = broker.consumer_groups.groups.get(group_id)
        if group is None:  # librdkafka and the Java admin client then ask DescribeGroups (a classic group)
            groups.append(Described(error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                                    error_message=f"group {group_id!r} is not a consumer group", group_id=group_id,
                                    group_state="Dead", group_epoch=-1, assignment_epoch=-1, assignor_name="",
                                    members=[], authorized_operations=NOT_ASKED))
            continue
        members = [Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id, member_epoch=m.epoch,
                          client_id=m.client_id, client_host=m.client_host,
                          subscribed_topic_names=sorted(m.subscribed_names),
                          subscribed_topic_regex=m.subscribed_regex.pattern if m.subscribed_regex else None,
                          assignment=assignment(m.assigned),
                          target_assignment=assignment(group.target.get(m.member_id, frozenset())),
                          member_type=CONSUMER_MEMBER)
                   for m in group.members.values()]
        groups.append(Described(error_code=0, error_message=None, group_id=group_id, group_state=group.state.value,
                                group_epoch=group.epoch, assignment_epoch=group.assignment_epoch,
                                assignor_name=group.assignor, members=members,
                                authorized_operations=operations))
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=groups)
