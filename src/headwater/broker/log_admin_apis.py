"""DeleteRecords and DescribeLogDirs: moving a partition's start on request, and its size on disk."""
from __future__ import annotations

import logging
import shutil

from headwater.broker.per_partition import answer_partitions
from headwater.log import OffsetOutOfRangeError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import partition_results, topic_check

logger = logging.getLogger("headwater.broker")

DeleteRecordsResponse = MESSAGE_CLASSES[ApiKey.DELETE_RECORDS][1]
DescribeLogDirsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_LOG_DIRS][1]
HIGH_WATERMARK = -1  # DeleteRecords: "everything appended so far"


async def delete_records(broker, header, request):
    TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
    PartitionResult = TopicResult.DeleteRecordsPartitionResult

    def answer(plog, topic, part):
        error, low_watermark = ErrorCode.NONE, -1
        if plog is None:
            error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        else:
            offset = plog.log_end_offset if part.offset == HIGH_WATERMARK else part.offset
            try:
                low_watermark = plog.delete_records_before(offset)
                broker.wakeups.notify(topic, part.partition_index)   # the new log start is news to fetch sessions
                logger.info("records of %s-%d before %d deleted", topic, part.partition_index, low_watermark)
            except OffsetOutOfRangeError:
                error = ErrorCode.OFFSET_OUT_OF_RANGE
        return PartitionResult(partition_index=part.partition_index, low_watermark=low_watermark, error_code=error)
    topics = answer_partitions(broker, request.topics, TopicResult, answer)
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)


async def describe_log_dirs(broker, header, request):
    LogDirResult = DescribeLogDirsResponse.DescribeLogDirsResult
    TopicResult = LogDirResult.DescribeLogDirsTopic
    PartitionResult = TopicResult.DescribeLogDirsPartition
    # No topics: all of them; a topic without partitions (kafka-python sends null): all of its partitions.
    wanted = None if request.topics is None else {t.topic: t.partitions for t in request.topics}
    topics = []
    for name, topic in sorted(broker.log_manager.topics.items()):
        if wanted is not None and name not in wanted:
            continue
        chosen = None if wanted is None else wanted[name]
        partitions = [PartitionResult(partition_index=i, partition_size=plog.size_bytes, offset_lag=0,
                                      is_future_key=False)
                      for i, plog in enumerate(topic.partitions) if not chosen or i in chosen]
        topics.append(TopicResult(name=name, partitions=partitions))
    data_dir = broker.config.data_dir.resolve()
    disk = shutil.disk_usage(data_dir)
    result = LogDirResult(error_code=0, log_dir=str(data_dir), topics=topics, total_bytes=disk.total,
                          usable_bytes=disk.free)
    return DescribeLogDirsResponse(throttle_time_ms=0, error_code=0, results=[result])


delete_records_rule = partition_results(topic_check(Op.DELETE), DeleteRecordsResponse.DeleteRecordsTopicResult,
                                        DeleteRecordsResponse.DeleteRecordsTopicResult.DeleteRecordsPartitionResult,
                                        low_watermark=-1)
