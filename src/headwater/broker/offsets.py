"""ListOffsets and OffsetForLeaderEpoch: finding positions in a partition."""
from __future__ import annotations

from headwater.broker.handlers import answer_partitions, handles
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

ListOffsetsResponse = MESSAGE_CLASSES[ApiKey.LIST_OFFSETS][1]
OffsetForLeaderEpochResponse = MESSAGE_CLASSES[ApiKey.OFFSET_FOR_LEADER_EPOCH][1]
LATEST, EARLIEST = -1, -2
LEADER_EPOCH = 0  # one broker, never a leader change


def _lookup(plog, timestamp: int) -> tuple[int, int]:
    """(timestamp, offset) for a ListOffsets query; (-1, -1) when no record is that late."""
    if timestamp == LATEST:
        return -1, plog.log_end_offset
    if timestamp == EARLIEST:
        return -1, plog.log_start_offset
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return ts, offset


@handles(ApiKey.LIST_OFFSETS, 1, 5)
async def list_offsets(broker, header, request):
    T = ListOffsetsResponse.ListOffsetsTopicResponse
    P = T.ListOffsetsPartitionResponse

    def answer(plog, topic, part):
        if plog is None:
            return P(partition_index=part.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                     timestamp=-1, offset=-1, leader_epoch=-1)
        ts, offset = _lookup(plog, part.timestamp)
        return P(partition_index=part.partition_index, error_code=0, timestamp=ts, offset=offset,
                 leader_epoch=LEADER_EPOCH)
    return ListOffsetsResponse(throttle_time_ms=0, topics=answer_partitions(broker, request.topics, T, answer))


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 3)
async def offset_for_leader_epoch(broker, header, request):
    T = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    P = T.EpochEndOffset

    def answer(plog, topic, part):
        if plog is None:
            return P(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partition=part.partition, leader_epoch=-1,
                     end_offset=-1)
        return P(error_code=0, partition=part.partition, leader_epoch=LEADER_EPOCH, end_offset=plog.log_end_offset)
    topics = answer_partitions(broker, request.topics, T, answer, topic_field="topic", partition_field="partition")
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
