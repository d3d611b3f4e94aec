"""Fetch: reading partitions from an offset, long-polling until data arrives.

A fetch that finds fewer than ``min_bytes`` sleeps on the growth signals of the partitions
it asked for and is woken by the append itself, so a waiting consumer sees new data at
once and costs nothing while it waits. Which partitions a fetch reads and which of them
its response carries is the fetch session's say (KIP-227, ``broker.fetch_sessions``).
"""
from __future__ import annotations

import asyncio
import logging
from contextlib import AbstractContextManager, nullcontext

import numpy as np

from headwater.broker.fetch_sessions import FINAL_EPOCH, NO_SESSION, FetchContext, FetchPosition, Partition
from headwater.broker.wakeups import GrowthSignals, Watch
from headwater.log import OffsetOutOfRangeError
from headwater.log.offset_columns import NO_UNSTABLE
from headwater.protocol.errors import ErrorCode
from headwater.protocol.fetch_request import FetchPartitions
from headwater.protocol.fetch_response import FetchedPartition, FetchedTopic, FetchResponse, SplicedTopic, quiet_entries
from headwater.records import CorruptRecordError
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import TOPIC_DENIED, partition_answers

logger = logging.getLogger("headwater.broker")
READ_COMMITTED = 1
TOPIC_WIDE_WATCH = 64   # a fetch naming this many partitions of a topic waits on the whole topic


def _wanted(request) -> list[tuple[Partition, FetchPosition]]:
    return [((t.topic, p.partition), p) for t in request.topics for p in t.partitions]


def _forgotten(request) -> list[Partition]:
    return [(t.topic, p) for t in request.forgotten_topics_data for p in t.partitions]


def _read_partitions(broker, targets: list[tuple[Partition, FetchPosition]], request, spent: int = 0):
    """One pass over the partitions to read: (each partition's response entry, which is also the
    fetch session's news of it; bytes read; any error). ``spent``: record bytes the response
    already carries.

    KIP-74: ``max_bytes`` bounds the whole response and ``partition_max_bytes`` each
    partition; only the first batch of the first non-empty partition may exceed them, so
    a client always progresses (librdkafka refuses a response over its own limit)."""
    budget = request.max_bytes - spent
    committed = request.isolation_level == READ_COMMITTED
    total, errors, reads = 0, False, {}
    # Looked up once (and each topic once per run of its partitions): this loop runs over every
    # partition of every fetch, and a partition with nothing new must cost next to nothing.
    topics, stable_offset = broker.log_manager.topics, broker.txn_partitions.last_stable_offset
    no_error, quiet_aborted = ErrorCode.NONE, [] if committed else None
    entry = FetchedPartition._make   # from one tuple: half the cost of the keyword constructor
    name, logs = None, []
    for key, position in targets:
        if key[0] != name:
            name = key[0]
            topic = topics.get(name)
            logs = topic.partitions if topic is not None else []
        index = key[1]
        plog = logs[index] if 0 <= index < len(logs) else None
        if plog is None:
            reads[key] = FetchedPartition(index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None, -1, b"")
            errors = True
            continue
        end = plog.log_end_offset
        # without an open transaction the last stable offset is the end: no call for it
        stable = end if plog.first_unstable_offset is None else stable_offset(name, index, plog)
        if position.fetch_offset == end:   # a consumer that has caught up costs no read: the idle case
            reads[key] = entry((index, no_error, end, stable, plog.log_start_offset, quiet_aborted, -1, b""))
            continue
        error, records, aborted = no_error, b"", None
        try:
            # read_committed: nothing at or past the LSO
            records = plog.read(position.fetch_offset, min(position.partition_max_bytes, budget),
                                min_one=total + spent == 0, upto=stable if committed else None)
        except OffsetOutOfRangeError:
            error = ErrorCode.OFFSET_OUT_OF_RANGE
            errors = True
        except (OSError, CorruptRecordError) as exc:   # this log cannot be read; the others still answer
            logger.warning("fetch from %s at offset %d: cannot read its log: %s", plog.directory.name,
                           position.fetch_offset, exc)
            error = ErrorCode.KAFKA_STORAGE_ERROR
            errors = True
        if committed and not error:   # read_committed: which transactions in range were aborted
            aborted = [(a.producer_id, a.first_offset)
                       for a in plog.aborted_txns.between(position.fetch_offset, stable)] if records else []
        total += len(records)
        budget -= len(records)
        reads[key] = FetchedPartition(index, error, end, stable, plog.log_start_offset, aborted, -1, records)
    return reads, total, errors


def _read_topics(broker, request, version: int) -> tuple[list, int, bool]:
    """A fetch without a session (librdkafka's): each topic's answer, in the order asked; bytes
    read; any error. Each partition is read as ``_read_partitions`` reads it, but the quiet
    partitions of a wide topic (``_read_spliced``) are answered all at once."""
    responses, total, errors = [], 0, False
    for fetch_topic in request.topics:
        if not fetch_topic.partitions:
            continue
        spliced = _read_spliced(broker, request, version, fetch_topic, total)
        if spliced is not None:
            answer, size, error = spliced
        else:
            targets = [((fetch_topic.topic, p.partition), p) for p in fetch_topic.partitions]
            reads, size, error = _read_partitions(broker, targets, request, total)
            answer = FetchedTopic(fetch_topic.topic, [reads[key] for key, _ in targets])
        responses.append(answer)
        total += size
        errors = errors or error
    return responses, total, errors


def _read_spliced(broker, request, version: int, fetch_topic, spent: int) -> tuple[SplicedTopic, int, bool] | None:
    """A topic of which the fetch names most partitions, TOPIC_WIDE_WATCH at least: every partition
    is compared with its log's end in one array operation (the topic's ``OffsetColumns``), and only
    those whose fetch offset is not the end are read (``_read_partitions``); the others' entries are
    filled in by column. None where that does not apply (few partitions, an unknown topic or partition)."""
    topic, partitions = broker.log_manager.topics.get(fetch_topic.topic), fetch_topic.partitions
    if topic is None or type(partitions) is not FetchPartitions or len(partitions) < TOPIC_WIDE_WATCH:
        return None   # (a request not decoded by fetch_request: the tests' kafka-python objects)
    logs, name, columns = topic.partitions, fetch_topic.topic, topic.offsets
    if columns.logs is not logs:
        return None   # partitions being added this moment: their columns are not attached yet
    wanted = partitions.array()
    # native integers: the request's column is big-endian and strided, and each gather by it would convert it again
    index = wanted["partition"].astype(np.intp)
    # the ufuncs' reductions, not ndarray.min/max: those each go through a Python wrapper first
    if np.minimum.reduce(index) < 0 or np.maximum.reduce(index) >= len(logs):
        return None   # an unknown partition: answered with its error as usual
    ends = columns.end[index]   # copies: another thread's retention may move a log start meanwhile
    entries = quiet_entries(version, len(index))
    entries["partition_index"] = index
    entries["high_watermark"] = ends
    # Each numpy call costs ~1 µs with the memory cold after the request's decoding: with no transaction
    # open anywhere in the topic (one reduction over its column), every last stable offset is the end.
    entries["last_stable_offset"] = (ends if np.maximum.reduce(columns.unstable) == NO_UNSTABLE
                                     else _stable_offsets(broker, name, logs, columns.unstable[index], index, ends))
    if version >= 5:
        entries["log_start_offset"] = columns.start[index]
    if request.isolation_level == READ_COMMITTED:
        entries["aborted_count"] = 0   # an empty list, not null
    # the array's own nonzero, not np.flatnonzero: that goes through five Python wrappers to get there
    busy = (wanted["fetch_offset"] != ends).nonzero()[0].tolist()
    if not busy:   # all quiet, the case of a consumer caught up
        return SplicedTopic(name, entries, {}), 0, False
    targets = [((name, position.partition), position) for position in map(partitions.__getitem__, busy)]
    reads, size, errors = _read_partitions(broker, targets, request, spent)
    return SplicedTopic(name, entries, {i: reads[key] for i, (key, _) in zip(busy, targets)}), size, errors


def _stable_offsets(broker, name: str, logs: list, unstable: np.ndarray, index: np.ndarray,
                    ends: np.ndarray) -> np.ndarray:
    """Each named partition's last stable offset: its end, or ``TxnPartitions``' where a transaction is open."""
    stable = ends.copy()
    stable_offset = broker.txn_partitions.last_stable_offset
    for i in np.flatnonzero(unstable != NO_UNSTABLE).tolist():
        p = int(index[i])
        stable[i] = stable_offset(name, p, logs[p])
    return stable


def _record_bytes(topic) -> int:
    """The record bytes a topic's answer carries (a spliced topic's quiet partitions carry none)."""
    partitions = topic.read.values() if type(topic) is SplicedTopic else topic.partitions
    return sum(len(p.records) for p in partitions if p.records)


def _topic_results(answered: list[Partition], reads: dict[Partition, FetchedPartition]) -> tuple[list, dict[str, int]]:
    """The response's topics, each with its answered partitions, in the order first answered, and
    the record bytes each carries."""
    by_topic: dict[str, list] = {}
    for key in answered:
        partitions = by_topic.get(key[0])
        if partitions is None:
            partitions = by_topic[key[0]] = []
        partitions.append(reads[key])
    return ([FetchedTopic(topic, partitions) for topic, partitions in by_topic.items()],
            {topic: sum(len(p.records) for p in partitions if p.records) for topic, partitions in by_topic.items()})


def _watch(signals: GrowthSignals, context: FetchContext, request) -> AbstractContextManager[Watch]:
    """What the fetch waits on: its session's Watch, else one for this fetch only, on the partitions
    it names, or on a whole topic where it names many (a wake-up it did not ask for only has it
    read again)."""
    if context.session is not None:
        return nullcontext(context.session.watch)
    wide = {t.topic for t in request.topics if len(t.partitions) >= TOPIC_WIDE_WATCH}
    narrow = [(t.topic, p.partition) for t in request.topics if t.topic not in wide for p in t.partitions]
    return signals.watch(narrow, wide)


async def fetch(broker, header, request):
    sessions = broker.fetch_sessions
    # No session now or after (epoch -1), each topic named once: answered topic by topic as asked,
    # from the request itself (no partition of a wide topic becomes an object of its own)
    topics = request.topics
    sessionless = request.session_epoch == FINAL_EPOCH and (len(topics) < 2
                                                            or len({t.topic for t in topics}) == len(topics))
    context = sessions.context(request.session_id, request.session_epoch, () if sessionless else _wanted(request),
                               () if sessionless else _forgotten(request))
    if context.error:
        return FetchResponse(throttle_time_ms=0, error_code=context.error, session_id=NO_SESSION, responses=[])
    # A fetch that may wait takes its deadline before its first read; one with max_wait 0 reads no clock.
    may_wait = request.max_wait_ms > 0 and (context.targets or context.session
                                            or any(len(t.partitions) for t in topics))
    if may_wait:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + request.max_wait_ms / 1000

    def read() -> tuple:
        if sessionless:
            return _read_topics(broker, request, header.api_version)
        return _read_partitions(broker, context.targets, request)

    answer, total, errors = read()
    if may_wait and total < request.min_bytes and not errors and (remaining := deadline - loop.time()) > 0:
        # The watch is set up only now, for a fetch that must wait: most of librdkafka's are answered
        # at once. No change falls between the read and the watch: nothing is awaited in between, and
        # every notify runs on this loop's thread (appends; the maintenance thread's moves come
        # through call_soon_threadsafe).
        with _watch(broker.wakeups, context, request) as watch:
            watch.arm()
            while await watch.wait(remaining):   # else time is up and nothing changed: the reads stand
                sessions.changed(context)
                watch.arm()   # a fresh waiter for the next wait: the last one is done
                answer, total, errors = read()
                remaining = deadline - loop.time()
                if total >= request.min_bytes or errors or remaining <= 0:
                    break
    if sessionless:
        responses = answer
        for topic in responses:
            broker.stats.fetched(topic.topic, _record_bytes(topic))
    else:
        answered = sessions.answer(context, answer, request.isolation_level == READ_COMMITTED)
        responses, sizes = _topic_results(answered, answer)
        for topic, size in sizes.items():
            broker.stats.fetched(topic, size)
    return FetchResponse(throttle_time_ms=0, error_code=0, session_id=context.session_id, responses=responses)


async def fetch_rule(access, header, request, handle):
    """READ on each topic the answer carries, checked after the read: within a fetch session (KIP-227)
    partitions are read without being named, and READ may have been revoked since the session began.
    Nothing read from a topic without READ leaves; its partitions are answered with the denial."""
    response = await handle(request)
    Partition = type(response).FetchableTopicResponse.PartitionData
    for topic in response.responses:
        if not access.topic(Op.READ, topic.topic):
            topic.partitions = partition_answers(Partition, "partition_index",
                                                 (p.partition_index for p in topic.partitions),
                                                 error_code=TOPIC_DENIED, high_watermark=-1, records=None)
    return response
