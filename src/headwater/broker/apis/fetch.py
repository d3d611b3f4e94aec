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
from headwater.records import iter_batches

FetchResponse = MESSAGE_CLASSES[ApiKey.FETCH][1]
TopicResult = FetchResponse.FetchableTopicResponse
PartitionData = TopicResult.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
READ_COMMITTED = 1


def _below(records: bytes, stable: int) -> bytes:
    """The whole batches of ``records`` that lie below the last stable offset."""
    end = 0
    for pos, header in iter_batches(records, validate=False):
        if header.base_offset >= stable:
            break
        end = pos + header.size
    return records[:end]


def _read_partitions(broker, request):
    """One pass over the requested partitions: (responses, bytes read, any error).

    KIP-74: ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each
    partition; only the first batch of the first non-empty partition may exceed them, so
    a client always progresses (librdkafka refuses a response over its own limit)."""
    budget = request.max_bytes
    committed = request.isolation_level == READ_COMMITTED
    total, errors, responses = 0, False, []
    for topic in request.topics:
        partitions = []
        for part in topic.partitions:
            plog = broker.log_manager.get_log(topic.topic, part.partition)
            error, records, aborted = ErrorCode.NONE, b"", None
            end = plog.log_end_offset if plog is not None else -1
            stable = broker.txn_partitions.last_stable_offset(topic.topic, part.partition, plog) if plog else -1
            if plog is None:
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                try:
                    records = plog.read(part.fetch_offset, min(part.partition_max_bytes, budget), min_one=total == 0)
                except OffsetOutOfRangeError:
                    error = ErrorCode.OFFSET_OUT_OF_RANGE
            if committed and plog is not None and not error:
                # read_committed: nothing at or past the LSO, and which transactions in range were aborted
                if stable < end:
                    records = _below(records, stable)
                aborted = [AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                           for a in plog.aborted_txns.between(part.fetch_offset, stable)]
            total += len(records)
            budget -= len(records)
            errors = errors or error != ErrorCode.NONE
            start = plog.log_start_offset if plog else -1
            partitions.append(PartitionData(partition_index=part.partition, error_code=error, high_watermark=end,
                                            last_stable_offset=stable, log_start_offset=start,
                                            aborted_transactions=aborted, preferred_read_replica=-1,
                                            records=records))
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
