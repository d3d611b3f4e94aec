"""Fetch: reading partitions from an offset, long-polling until data arrives.

A fetch that finds fewer than ``min_bytes`` sleeps on the growth signals of the partitions
it asked for and is woken by the append itself, so a waiting consumer sees new data at
once and costs nothing while it waits.
"""
from __future__ import annotations

import asyncio

from headwater.log import OffsetOutOfRangeError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

FetchResponse = MESSAGE_CLASSES[ApiKey.FETCH][1]
TopicResult = FetchResponse.FetchableTopicResponse
PartitionData = TopicResult.PartitionData


def _read_partitions(broker, request):
    """One pass over the requested partitions: (responses, bytes read, any error).

    KIP-74: ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each
    partition; only the first batch of the first non-empty partition may exceed them, so
    a client always progresses (librdkafka refuses a response over its own limit)."""
    budget = request.max_bytes
    total, errors, responses = 0, False, []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            plog = broker.log_manager.get_log(topic.topic, part.partition)
            error, records = ErrorCode.NONE, b""
            if plog is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    records = plog.read(part.fetch_offset, min(part.partition_max_bytes, budget), min_one=total == 0)
                except OffsetOutOfRangeError:
                    error = ErrorCode.OFFSET_OUT_OF_RANGE
            total += len(records)
            budget -= len(records)
            errors = errors or error != ErrorCode.NONE
            end = plog.log_end_offset if plog is not None else -1
            start = plog.log_start_offset if plog else -1
            partitions.append(PartitionData(partition_index=part.partition, error_code=error, high_watermark=end,
                                            last_stable_offset=end, log_start_offset=start,
                                            aborted_transactions=[], preferred_read_replica=-1, records=records))
        responses.append(TopicResult(topic=topic.topic, partitions=partitions))
    return responses, total, errors


async def fetch(broker, header, request):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    # Only partitions that exist get a signal: a client naming unknown ones must not make the broker keep state.
    watched = [(t.topic, p.partition) for t in request.topics for p in t.partitions
               if broker.log_manager.get_log(t.topic, p.partition) is not None]
    while True:
        with broker.growth.watch(watched) as signals:
            responses, total, errors = _read_partitions(broker, request)
            remaining = deadline - loop.time()
            if total >= request.min_bytes or errors or remaining <= 0 or not signals:
                break
            await asyncio.wait(signals, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
    if broker.metrics is not None:
        for topic in responses:
            broker.metrics.fetched(topic.topic, sum(len(p.records) for p in topic.partitions))
    # Fetch sessions (KIP-227) are not kept: session id 0 tells clients to send full requests.
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=responses)
