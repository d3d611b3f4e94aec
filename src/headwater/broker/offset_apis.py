"""ListOffsets and OffsetForLeaderEpoch: finding positions in a partition."""
from __future__ import annotations

from headwater.broker.fetch_apis import READ_COMMITTED
from headwater.broker.per_partition import answer_partitions
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import partition_results, topic_check

ListOffsetsResponse = MESSAGE_CLASSES[ApiKey.LIST_OFFSETS][1]
OffsetForLeaderEpochResponse = MESSAGE_CLASSES[ApiKey.OFFSET_FOR_LEADER_EPOCH][1]
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3   # MAX_TIMESTAMP: v7+ (KIP-734)
LEADER_EPOCH = 0  # one broker, never a leader change


def _lookup(plog, timestamp: int, latest: int) -> tuple[int, int]:
    """(timestamp, offset) for a ListOffsets query; (-1, -1) when no record is that late."""
    if timestamp == LATEST:
        return -1, latest
    if timestamp == EARLIEST:
        return -1, plog.log_start_offset
    found = plog.max_timestamp() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return ts, offset


async def list_offsets(broker, header, request):
    TopicResult = ListOffsetsResponse.ListOffsetsTopicResponse
    PartitionResult = TopicResult.ListOffsetsPartitionResponse

    def answer(plog, topic, part):
        if plog is None:
            return PartitionResult(partition_index=part.partition_index,
                                   error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, timestamp=-1, offset=-1,
                                   leader_epoch=-1)
        # read_committed (v2+) asks for the last stable offset as the latest
        committed = header.api_version >= 2 and request.isolation_level == READ_COMMITTED
        latest = (broker.txn_partitions.last_stable_offset(topic, part.partition_index, plog) if committed
                  else plog.log_end_offset)
        ts, offset = _lookup(plog, part.timestamp, latest)
        return PartitionResult(partition_index=part.partition_index, error_code=0, timestamp=ts, offset=offset,
                               leader_epoch=LEADER_EPOCH)
    topics = answer_partitions(broker, request.topics, TopicResult, answer)
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


async def offset_for_leader_epoch(broker, header, request):
    TopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    PartitionResult = TopicResult.EpochEndOffset

    def answer(plog, topic, part):
        if plog is None:
            return PartitionResult(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partition=part.partition,
                                   leader_epoch=-1, end_offset=-1)
        return PartitionResult(error_code=0, partition=part.partition, leader_epoch=LEADER_EPOCH,
                               end_offset=plog.log_end_offset)
    topics = answer_partitions(broker, request.topics, TopicResult, answer, topic_field="topic",
                               partition_field="partition")
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)


list_offsets_rule = partition_results(topic_check(Op.DESCRIBE), ListOffsetsResponse.ListOffsetsTopicResponse,
                                      ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse)
offset_for_leader_epoch_rule = partition_results(
    topic_check(Op.DESCRIBE, lambda t: t.topic), OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult,
    OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult.EpochEndOffset, name="topic", index="partition",
    indexes_of=lambda t: [p.partition for p in t.partitions], leader_epoch=-1, end_offset=-1)
