"""Fetch: reading partitions from an offset, long-polling until data arrives.

A fetch that finds fewer than ``min_bytes`` sleeps on the growth signals of the partitions
it asked for and is woken by the append itself, so a waiting consumer sees new data at
once and costs nothing while it waits. Which partitions a fetch reads and which of them
its response carries is the fetch session's say (KIP-227, ``broker.fetch_sessions``).
"""
from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

from headwater.broker.fetch_sessions import NO_SESSION, FetchContext, FetchPosition, Partition
from headwater.broker.wakeups import GrowthSignals, Watch
from headwater.log import OffsetOutOfRangeError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.fetch_response import FetchedPartition, FetchedTopic, FetchResponse
from headwater.records import CorruptRecordError

log = logging.getLogger("headwater.broker")
READ_COMMITTED = 1


class PartitionRead(NamedTuple):
    """One partition read: its fetch_sessions.PartitionNews, and what the response carries of it."""
    error: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes
    aborted: list[tuple[int, int]] | None   # (producer id, first offset); None under read_uncommitted


def _wanted(request) -> list[tuple[Partition, FetchPosition]]:
    return [((t.topic, p.partition), p) for t in request.topics for p in t.partitions]


def _forgotten(request) -> list[Partition]:
    return [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions]


def _read_partitions(broker, targets: list[tuple[Partition, FetchPosition]], request):
    """One pass over the partitions to read: (reads, bytes read, any error).

    KIP-74: ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each
    partition; only the first batch of the first non-empty partition may exceed them, so
    a client always progresses (librdkafka refuses a response over its own limit)."""
    budget = request.max_bytes
    committed = request.isolation_level == READ_COMMITTED
    total, errors, reads = 0, False, {}
    # Looked up once (and each topic once per run of its partitions): this loop runs over every
    # partition of every fetch, idle consumers' included.
    topics, stable_offset, no_error = broker.log_manager.topics, broker.txn_partitions.last_stable_offset, ErrorCode.NONE
    name, logs = None, []
    for key, position in targets:
        if key[0] != name:
            name = key[0]
            topic = topics.get(name)
            logs = topic.partitions if topic is not None else []
        plog = logs[key[1]] if 0 <= key[1] < len(logs) else None
        if plog is None:
            reads[key] = PartitionRead(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, b"", None)
            errors = True
            continue
        error, records, aborted = no_error, b"", None
        end, stable = plog.log_end_offset, stable_offset(*key, plog)
        if position.fetch_offset != end:   # a consumer that has caught up costs no read: the idle case
            try:
                # read_committed: nothing at or past the LSO
                records = plog.read(position.fetch_offset, min(position.partition_max_bytes, budget),
                                    min_one=total == 0, upto=stable if committed else None)
            except OffsetOutOfRangeError:
                error = ErrorCode.OFFSET_OUT_OF_RANGE
                errors = True
            except (OSError, CorruptRecordError) as exc:   # this log cannot be read; the others still answer
                log.warning("fetch from %s at offset %d: cannot read its log: %s", plog.directory.name,
                            position.fetch_offset, exc)
                error = ErrorCode.KAFKA_STORAGE_ERROR
                errors = True
        if committed and not error:   # read_committed: which transactions in range were aborted
            aborted = [(a.producer_id, a.first_offset)
                       for a in plog.aborted_txns.between(position.fetch_offset, stable)] if records else []
        total += len(records)
        budget -= len(records)
        reads[key] = PartitionRead(error, end, stable, plog.log_start_offset, records, aborted)
    return reads, total, errors


def _topic_results(answered: list[Partition], reads: dict[Partition, PartitionRead]) -> tuple[list, dict[str, int]]:
    """The response's topics, each with its answered partitions, in the order first answered, and
    the record bytes each carries."""
    by_topic: dict[str, list] = {}
    sizes: dict[str, int] = {}
    for topic, partition in answered:
        error, high_watermark, stable, start, records, aborted = reads[topic, partition]
        partitions = by_topic.get(topic)
        if partitions is None:
            partitions = by_topic[topic] = []
            sizes[topic] = 0
        partitions.append(FetchedPartition(partition, error, high_watermark, stable, start, aborted, -1, records))
        sizes[topic] += len(records)
    return [FetchedTopic(topic, partitions) for topic, partitions in by_topic.items()], sizes


@contextmanager
def _watch(signals: GrowthSignals, context: FetchContext) -> Iterator[Watch]:
    """What the fetch waits on: its session's Watch, else one on its partitions for this fetch only."""
    if context.session is not None:
        yield context.session.watch
        return
    with signals.watch([p for p, _ in context.targets]) as watch:
        yield watch


async def fetch(broker, header, request):
    sessions = broker.fetch_sessions
    context = sessions.context(request.session_id, request.session_epoch, _wanted(request), _forgotten(request))
    if context.error:
        return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=NO_SESSION, responses=[])
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000
    with _watch(broker.growth, context) as watch:
        while True:
            watch.arm()   # before reading: an append between the read and the wait still wakes it
            reads, total, errors = _read_partitions(broker, context.targets, request)
            remaining = deadline - loop.time()
            if total >= request.min_bytes or errors or remaining <= 0 or not (context.targets or context.session):
                break
            if not await watch.wait(remaining):
                break   # time is up and nothing changed: the reads above still stand
            sessions.changed(context)
    answered = sessions.answer(context, reads, request.isolation_level == READ_COMMITTED)
    responses, sizes = _topic_results(answered, reads)
    for topic, size in sizes.items():
        broker.stats.fetched(topic, size)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=context.session_id, responses=responses)
