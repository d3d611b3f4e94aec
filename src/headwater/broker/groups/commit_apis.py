"""OffsetCommit, OffsetFetch, OffsetDelete: where each group has got to in each partition."""
from __future__ import annotations

from collections import defaultdict

from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (GROUP_DENIED, committed, empty_response, group, group_read,
                                                     partition_answers, take_denied)

from .coordinator import OFFSET_METADATA_MAX_BYTES
from .group import CommittedOffset

OffsetCommitResponse = MESSAGE_CLASSES[ApiKey.OFFSET_COMMIT][1]
OffsetFetchResponse = MESSAGE_CLASSES[ApiKey.OFFSET_FETCH][1]
OffsetDeleteResponse = MESSAGE_CLASSES[ApiKey.OFFSET_DELETE][1]
NO_OFFSET = -1


def _partition_error(broker, topic: str, partition: int, metadata: str | None) -> ErrorCode:
    if broker.log_manager.get_log(topic, partition) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if metadata is not None and len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
        return ErrorCode.OFFSET_METADATA_TOO_LARGE
    return ErrorCode.NONE


async def _commit(broker, request, offsets: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
    """A consumer group's (KIP-848) member is checked against its member epoch, a classic group's
    against its generation; the offsets of both kinds are kept by the classic coordinator's store."""
    error = broker.consumer_groups.check_commit(request.group_id, request.member_id,
                                                request.generation_id_or_member_epoch)
    if error is None:
        return await broker.groups.commit(request.group_id, request.generation_id_or_member_epoch, request.member_id,
                                          request.group_instance_id, offsets)
    if error:
        return error
    return await broker.groups.commit(request.group_id, -1, "", None, offsets)  # no classic members to check


async def offset_commit(broker, header, request):
    errors, offsets = {}, {}
    for topic in request.topics:
        for part in topic.partitions:
            tp = (topic.name, part.partition_index)
            errors[tp] = _partition_error(broker, topic.name, part.partition_index, part.committed_metadata)
            if not errors[tp]:
                offsets[tp] = CommittedOffset(part.committed_offset, part.committed_leader_epoch,
                                              part.committed_metadata)
    if offsets:
        error = await _commit(broker, request, offsets)
        errors.update((tp, error) for tp in offsets)
    by_topic = defaultdict(list)
    PartitionResult = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
    for (topic, partition), error in errors.items():
        by_topic[topic].append(PartitionResult(partition_index=partition, error_code=error))
    TopicResult = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse(topics=[TopicResult(name=name, partitions=parts) for name, parts in by_topic.items()])


async def offset_fetch(broker, header, request):
    """v8+ ask for many groups at once, v9+ as a consumer group's member (checked as a commit is).
    v7+ (KIP-447): a read_committed consumer asks not to start from offsets a transaction may still change."""
    stable_only = header.api_version >= 7 and request.require_stable
    if header.api_version < 8:
        Topic = OffsetFetchResponse.OffsetFetchResponseTopic
        topics = _fetched(broker, request.group_id, request.topics, Topic, Topic.OffsetFetchResponsePartition,
                          stable_only)
        return OffsetFetchResponse(topics=topics, error_code=0)
    Group = OffsetFetchResponse.OffsetFetchResponseGroup
    Topic = Group.OffsetFetchResponseTopics
    groups = []
    for g in request.groups:
        error = _fetcher_error(broker, g.group_id, g.member_id, g.member_epoch)
        topics = [] if error else _fetched(broker, g.group_id, g.topics, Topic, Topic.OffsetFetchResponsePartitions,
                                           stable_only)
        groups.append(Group(group_id=g.group_id, topics=topics, error_code=error))
    return OffsetFetchResponse(groups=groups)


def _fetcher_error(broker, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
    """A consumer group's member must be one, at its current epoch; an admin (no member id) need not."""
    if member_id is None or member_epoch < 0:
        return ErrorCode.NONE
    return broker.consumer_groups.check_commit(group_id, member_id, member_epoch) or ErrorCode.NONE


def _fetched(broker, group_id: str, asked, Topic, Partition, stable_only: bool) -> list:
    committed = broker.groups.committed(group_id)
    unstable = broker.transactions.pending_offsets(group_id) if stable_only else set()
    if asked is None:  # v2+: every partition the group has an offset for
        wanted = defaultdict(list)
        for topic, partition in sorted(committed):
            wanted[topic].append(partition)
    else:
        wanted = {t.name: t.partition_indexes for t in asked}
    topics = []
    for name, partitions in wanted.items():
        parts = []
        for partition in partitions:
            stable = (name, partition) not in unstable
            c = committed.get((name, partition)) if stable else None
            parts.append(Partition(partition_index=partition, committed_offset=c.offset if c else NO_OFFSET,
                                   committed_leader_epoch=c.leader_epoch if c else -1,
                                   metadata=c.metadata if c else "",
                                   error_code=ErrorCode.NONE if stable else ErrorCode.UNSTABLE_OFFSET_COMMIT))
        topics.append(Topic(name=name, partitions=parts))
    return topics


async def offset_delete(broker, header, request):
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    in_use = broker.consumer_groups.subscribed_topics(request.group_id)  # a live consumer group keeps them
    error, errors = broker.groups.delete_offsets(request.group_id, [tp for tp in partitions if tp[0] not in in_use])
    errors.update((tp, ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC) for tp in partitions if tp[0] in in_use)
    TopicResult = OffsetDeleteResponse.OffsetDeleteResponseTopic
    PartitionResult = TopicResult.OffsetDeleteResponsePartition
    topics = [TopicResult(name=t.name, partitions=[PartitionResult(partition_index=p.partition_index,
                                                                   error_code=errors.get((t.name, p.partition_index), 0))
                                                   for p in t.partitions])
              for t in request.topics] if not error else []
    return OffsetDeleteResponse(error_code=error, throttle_time_ms=0, topics=topics)


offset_commit_rule = committed(OffsetCommitResponse.OffsetCommitResponseTopic,
                               OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition, group_read)
offset_delete_rule = group(Op.DELETE, committed(
    OffsetDeleteResponse.OffsetDeleteResponseTopic,
    OffsetDeleteResponse.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition, lambda a, r: None))


async def offset_fetch_rule(access, header, request, handle):
    """DESCRIBE on the group (each group from v8), and on each topic answered (the others left out)."""
    if header.api_version >= 8:  # many groups: each denied one answered with its error
        denied = take_denied(request, "groups", lambda g: access.group(Op.DESCRIBE, g.group_id))
        response = await handle(request) if request.groups or not denied else empty_response(header)
        for group_ in response.groups:
            group_.topics = [t for t in group_.topics if access.topic(Op.DESCRIBE, t.name)]
        Group = type(response).OffsetFetchResponseGroup
        response.groups += [Group(group_id=g.group_id, topics=[], error_code=GROUP_DENIED) for g in denied]
        return response
    if access.group(Op.DESCRIBE, request.group_id):
        response = await handle(request)
        response.topics = [t for t in response.topics if access.topic(Op.DESCRIBE, t.name)]
        return response
    # v0-1 have no error code of their own: each partition asked for carries it, as Kafka answers
    response = empty_response(header, error_code=GROUP_DENIED)
    Topic = type(response).OffsetFetchResponseTopic
    response.topics = [Topic(name=t.name, partitions=partition_answers(
        Topic.OffsetFetchResponsePartition, "partition_index", t.partition_indexes, committed_offset=-1,
        metadata="", error_code=GROUP_DENIED)) for t in request.topics or ()]
    return response
