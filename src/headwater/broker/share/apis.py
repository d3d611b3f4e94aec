"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge: the share-group API handlers."""
from __future__ import annotations

import asyncio
import uuid

from headwater.broker.endpoint import client_host
from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_messages import (ShareAcknowledgeResponse, ShareFetchResponse,
                                               ShareGroupDescribeResponse, ShareGroupHeartbeatResponse)
from headwater.records import iter_batches

from .coordinator import ShareError, ShareGroup
from .partition import AcknowledgeError, Acquired

READ_CHUNK = 1 << 20
Assignment = ShareGroupHeartbeatResponse.Assignment


async def share_group_heartbeat(broker, header, request):
    share = broker.share
    try:
        member, assignment = share.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                             request.subscribed_topic_names, header.client_id or "",
                                             client_host.get())
    except ShareError as exc:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=exc.code, error_message=str(exc),
                                           member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    group = share.groups.get(request.group_id)
    interval = group.config.int("share.heartbeat.interval.ms") if group else 0
    answer = None
    if assignment is not None:
        topics = broker.log_manager.topics
        answer = Assignment(topic_partitions=[Assignment.TopicPartitions(topic_id=topics[name].topic_id,
                                                                         partitions=partitions)
                                              for name, partitions in sorted(assignment.items())])
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=0, error_message=None, member_id=member.member_id,
                                       member_epoch=member.epoch, heartbeat_interval_ms=interval, assignment=answer)


async def share_group_describe(broker, header, request):
    Described = ShareGroupDescribeResponse.DescribedGroup
    Member = Described.Member
    TopicPartitions = Member.Assignment.TopicPartitions
    topics = broker.log_manager.topics
    groups = []
    for group_id in request.group_ids:
        group = broker.share.groups.get(group_id)
        if group is None:
            groups.append(Described(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"no share group {group_id!r}",
                                    group_id=group_id, group_state="Dead", group_epoch=-1, assignment_epoch=-1,
                                    assignor_name="", members=[]))
            continue
        members = [Member(member_id=m.member_id, rack_id=None, member_epoch=m.epoch, client_id=m.client_id,
                          client_host=m.client_host, subscribed_topic_names=m.subscription,
                          assignment=Member.Assignment(topic_partitions=[
                              TopicPartitions(topic_id=topics[t].topic_id, topic_name=t, partitions=ps)
                              for t, ps in sorted(m.assignment.items()) if t in topics]))
                   for m in group.members.values()]
        groups.append(Described(error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                                group_epoch=group.epoch, assignment_epoch=group.epoch, assignor_name="all",
                                members=members))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=groups)


def _names(broker, topics) -> dict[uuid.UUID, str | None]:
    """Topic ID -> name (None for an ID the broker does not know)."""
    found = {}
    for t in topics:
        topic = broker.log_manager.topic_by_id(t.topic_id)
        found[t.topic_id] = topic.name if topic else None
    return found


def _acknowledge(broker, group: ShareGroup, member_id: str, topics, names) -> dict[tuple[uuid.UUID, int], tuple]:
    """Apply the acknowledgement batches of a request: (topic id, partition) -> (error code, message)."""
    results = {}
    for t in topics:
        name = names[t.topic_id]
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            error, message = ErrorCode.NONE, None
            if name is None or broker.log_manager.get_log(name, p.partition_index) is None:
                error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic id {t.topic_id}"
            else:
                share_partition = broker.share.share_partition(group, name, p.partition_index)
                try:
                    share_partition.acknowledge(member_id, [(b.first_offset, b.last_offset, list(b.acknowledge_types))
                                                            for b in p.acknowledgement_batches])
                except AcknowledgeError as exc:
                    error, message = exc.code, str(exc)
                broker.share.changed(group, name, p.partition_index)
            results[(t.topic_id, p.partition_index)] = (error, message)
    return results


def _read_range(plog, first: int, last: int) -> bytes:
    """The whole batches that hold offsets first..last (the client keeps the acquired ones)."""
    chunks, offset = [], first
    while offset <= last:
        chunk = plog.read(offset, READ_CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
        for _, batch in iter_batches(chunk, validate=False):
            offset = max(offset, batch.last_offset + 1)
    return b"".join(chunks)


def _share_error(response_class, exc: ShareError, **fields):
    return response_class(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), responses=[],
                          node_endpoints=[], **fields)


async def share_fetch(broker, header, request):
    share = broker.share
    try:
        group = share.group(request.group_id or "")
        session = share.session(request.group_id, request.member_id, request.share_session_epoch)
    except ShareError as exc:
        return _share_error(ShareFetchResponse, exc, acquisition_lock_timeout_ms=0)
    names = _names(broker, request.topics)
    acked = _acknowledge(broker, group, request.member_id, request.topics, names)
    acquired: dict[tuple[uuid.UUID, int], list[Acquired]] = {}
    if session is not None:
        for t in request.topics:
            if names[t.topic_id] is not None:
                session.partitions.update((names[t.topic_id], p.partition_index) for p in t.partitions)
        for t in request.forgotten_topics_data:
            topic = broker.log_manager.topic_by_id(t.topic_id)
            if topic is not None:
                session.partitions.difference_update((topic.name, p) for p in t.partitions)
        acquired = await _acquire(broker, group, request, session.partitions)
    PartitionData = ShareFetchResponse.ShareFetchableTopicResponse.PartitionData
    by_topic: dict[uuid.UUID, list] = {}
    for key in sorted(set(acked) | set(acquired), key=lambda k: (str(k[0]), k[1])):
        topic_id, partition = key
        runs = acquired.get(key, [])
        error, message = acked.get(key, (ErrorCode.NONE, None))
        records = b""
        if runs:
            plog = broker.log_manager.get_log(broker.log_manager.topic_by_id(topic_id).name, partition)
            records = _read_range(plog, min(r.first_offset for r in runs), max(r.last_offset for r in runs))
        by_topic.setdefault(topic_id, []).append(PartitionData(
            partition_index=partition, error_code=0, error_message=None, acknowledge_error_code=error,
            acknowledge_error_message=message,
            current_leader=PartitionData.LeaderIdAndEpoch(leader_id=broker.config.node_id, leader_epoch=0),
            records=records, acquired_records=[PartitionData.AcquiredRecords(
                first_offset=r.first_offset, last_offset=r.last_offset, delivery_count=r.delivery_count)
                for r in runs]))
    Topic = ShareFetchResponse.ShareFetchableTopicResponse
    return ShareFetchResponse(throttle_time_ms=0, error_code=0, error_message=None,
                              acquisition_lock_timeout_ms=group.config.int("share.record.lock.duration.ms"),
                              responses=[Topic(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
                              node_endpoints=[])


async def _acquire(broker, group: ShareGroup, request, partitions: set[tuple[str, int]]):
    """Acquire up to MaxRecords for the member, waiting up to MaxWaitMs for records to become available."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    live = sorted(p for p in partitions if broker.log_manager.get_log(*p) is not None)
    while True:
        with broker.growth.watch(live) as watch:
            budget, acquired = max(request.max_records, 1), {}
            for topic, partition in live:
                if budget <= 0:
                    break
                plog = broker.log_manager.get_log(topic, partition)
                runs = broker.share.share_partition(group, topic, partition).acquire(
                    request.member_id, budget, plog.log_end_offset)
                if runs:
                    budget -= sum(r.last_offset - r.first_offset + 1 for r in runs)
                    acquired[(broker.log_manager.topics[topic].topic_id, partition)] = runs
                    broker.share.changed(group, topic, partition)
            remaining = deadline - loop.time()
            if acquired or remaining <= 0 or not live:
                return acquired
            await watch.wait(remaining)


async def share_acknowledge(broker, header, request):
    share = broker.share
    try:
        if request.share_session_epoch == 0:
            raise ShareError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session")
        group = share.group(request.group_id or "")
        share.session(request.group_id, request.member_id, request.share_session_epoch)
    except ShareError as exc:
        return _share_error(ShareAcknowledgeResponse, exc)
    names = _names(broker, request.topics)
    acked = _acknowledge(broker, group, request.member_id, request.topics, names)
    Topic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
    PartitionData = Topic.PartitionData
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, partition), (error, message) in acked.items():
        by_topic.setdefault(topic_id, []).append(PartitionData(
            partition_index=partition, error_code=error, error_message=message,
            current_leader=PartitionData.LeaderIdAndEpoch(leader_id=broker.config.node_id, leader_epoch=0)))
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                    responses=[Topic(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
                                    node_endpoints=[])
