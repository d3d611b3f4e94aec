"""ListOffsets and OffsetForLeaderEpoch: finding positions in a partition."""
from __future__ import annotations

from headwater.broker.handlers import handles
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
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            plog = broker.logs.get_log(topic.name, part.partition_index)
            if plog is None:
                partitions.append(P(partition_index=part.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                    timestamp=-1, offset=-1, leader_epoch=-1))
                continue
            ts, offset = _lookup(plog, part.timestamp)
            partitions.append(P(partition_index=part.partition_index, error_code=0, timestamp=ts, offset=offset,
                                leader_epoch=LEADER_EPOCH))
        topics.append(T(name=topic.name, partitions=partitions))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)


@handles(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 3)
async def offset_for_leader_epoch(broker, header, request):
    T = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
    P = T.EpochEndOffset
    topics = []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            plog = broker.logs.get_log(topic.topic, part.partition)
            if plog is None:
                partitions.append(P(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, partition=part.partition,
                                    leader_epoch=-1, end_offset=-1))
            else:
                partitions.append(P(error_code=0, partition=part.partition, leader_epoch=LEADER_EPOCH,
                                    end_offset=plog.log_end_offset))
        topics.append(T(topic=topic.topic, partitions=partitions))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)
