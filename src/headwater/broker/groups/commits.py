"""OffsetCommit, OffsetFetch, OffsetDelete: where each group has got to in each partition."""
from __future__ import annotations

from collections import defaultdict

from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

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
        error = broker.groups.commit(request.group_id, request.generation_id_or_member_epoch, request.member_id,
                                     request.group_instance_id, offsets)
        errors.update((tp, error) for tp in offsets)
    by_topic = defaultdict(list)
    PartitionResult = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
    for (topic, partition), error in errors.items():
        by_topic[topic].append(PartitionResult(partition_index=partition, error_code=error))
    TopicResult = OffsetCommitResponse.OffsetCommitResponseTopic
    return OffsetCommitResponse(topics=[TopicResult(name=name, partitions=parts) for name, parts in by_topic.items()])


async def offset_fetch(broker, header, request):
    committed = broker.groups.committed(request.group_id)
    # v7+ (KIP-447): a read_committed consumer asks not to start from offsets a transaction may still change
    stable_only = header.api_version >= 7 and request.require_stable
    unstable = broker.transactions.pending_offsets(request.group_id) if stable_only else set()
    if request.topics is None:  # v2+: every partition the group has an offset for
        wanted = defaultdict(list)
        for topic, partition in sorted(committed):
            wanted[topic].append(partition)
    else:
        wanted = {t.name: t.partition_indexes for t in request.topics}
    TopicResult = OffsetFetchResponse.OffsetFetchResponseTopic
    PartitionResult = TopicResult.OffsetFetchResponsePartition
    topics = []
    for name, partitions in wanted.items():
        parts = []
        for partition in partitions:
            stable = (name, partition) not in unstable
            c = committed.get((name, partition)) if stable else None
            parts.append(PartitionResult(partition_index=partition, committed_offset=c.offset if c else NO_OFFSET,
                                         committed_leader_epoch=c.leader_epoch if c else -1,
                                         metadata=c.metadata if c else "",
                                         error_code=ErrorCode.NONE if stable else ErrorCode.UNSTABLE_OFFSET_COMMIT))
        topics.append(TopicResult(name=name, partitions=parts))
    return OffsetFetchResponse(topics=topics, error_code=0)


async def offset_delete(broker, header, request):
    partitions = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, errors = broker.groups.delete_offsets(request.group_id, partitions)
    TopicResult = OffsetDeleteResponse.OffsetDeleteResponseTopic
    PartitionResult = TopicResult.OffsetDeleteResponsePartition
    topics = [TopicResult(name=t.name, partitions=[PartitionResult(partition_index=p.partition_index,
                                                                   error_code=errors.get((t.name, p.partition_index), 0))
                                                   for p in t.partitions])
              for t in request.topics] if not error else []
    return OffsetDeleteResponse(error_code=error, throttle_time_ms=0, topics=topics)
