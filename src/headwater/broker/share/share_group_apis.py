"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge: the share-group API handlers."""
from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable

from headwater.broker.endpoint import client_host
from headwater.protocol import share_fetch_response
from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_fetch_response import ShareFetchedTopic, SharePartitionData
from headwater.protocol.share_messages import (ShareAcknowledgeResponse, ShareFetchResponse,
                                               ShareGroupDescribeResponse, ShareGroupHeartbeatResponse)
from headwater.log.txn_index import is_aborted
from headwater.records import BatchHeader
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import (NOT_AUTHORIZED, TOPIC_DENIED, Rule, group, partition_answers,
                                                     per_resource)

from .coordinator import Changes, ShareCoordinator, ShareError, ShareGroup, ShareSession
from .partition import AcknowledgeError, Acquired, SharePartition, Undo

Assignment = ShareGroupHeartbeatResponse.Assignment
TopicIdPartition = tuple[uuid.UUID, int]
PARTITION_MAX_BYTES = 1 << 20    # what one partition reads per fetch at most (Kafka's max.partition.fetch.bytes default)
Fetched = tuple[list[Acquired], bytes]       # the runs acquired and the batches that carry them
Answers = dict[TopicIdPartition, tuple[ErrorCode, str | None]]     # acknowledgements': (error code, message)
Undos = dict[TopicIdPartition, tuple[tuple[str, int], SharePartition, Undo]]   # acknowledgements applied


async def share_group_heartbeat(broker, header, request):
    share = broker.share
    try:
        member, assignment = share.heartbeat(request.group_id, request.member_id, request.member_epoch,
                                             request.subscribed_topic_names, header.client_id or "",
                                             client_host.get())
    except ShareError as exc:
        return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=exc.code, error_message=str(exc),
                                           member_id=None, member_epoch=-1, heartbeat_interval_ms=0, assignment=None)
    group = share.groups.get(request.group_id)
    interval = group.config.int("share.heartbeat.interval.ms") if group else 0
    answer = None
    if assignment is not None:
        topics = broker.log_manager.topics
        answer = Assignment(topic_partitions=[Assignment.TopicPartitions(topic_id=topics[name].topic_id,
                                                                         partitions=partitions)
                                              for name, partitions in sorted(assignment.items())])
    return ShareGroupHeartbeatResponse(throttle_time_ms=0, error_code=0, error_message=None, member_id=member.member_id,
                                       member_epoch=member.epoch, heartbeat_interval_ms=interval, assignment=answer)


async def share_group_describe(broker, header, request):
    Described = ShareGroupDescribeResponse.DescribedGroup
    Member = Described.Member
    TopicPartitions = Member.Assignment.TopicPartitions
    topics = broker.log_manager.topics
    groups = []
    for group_id in request.group_ids:
        group = broker.share.groups.get(group_id)
        if group is None:
            groups.append(Described(error_code=ErrorCode.GROUP_ID_NOT_FOUND, error_message=f"no share group {group_id!r}",
                                    group_id=group_id, group_state="Dead", group_epoch=-1, assignment_epoch=-1,
                                    assignor_name="", members=[]))
            continue
        members = [Member(member_id=m.member_id, rack_id=None, member_epoch=m.epoch, client_id=m.client_id,
                          client_host=m.client_host, subscribed_topic_names=m.subscription,
                          assignment=Member.Assignment(topic_partitions=[
                              TopicPartitions(topic_id=topics[t].topic_id, topic_name=t, partitions=ps)
                              for t, ps in sorted(m.assignment.items()) if t in topics]))
                   for m in group.members.values()]
        groups.append(Described(error_code=0, error_message=None, group_id=group_id, group_state=group.state,
                                group_epoch=group.epoch, assignment_epoch=group.epoch, assignor_name="simple",
                                members=members))
    return ShareGroupDescribeResponse(throttle_time_ms=0, groups=groups)


def _names(broker, topics) -> dict[uuid.UUID, str | None]:
    """Topic ID -> name (None for an ID the broker does not know)."""
    found = {}
    for t in topics:
        topic = broker.log_manager.topic_by_id(t.topic_id)
        found[t.topic_id] = topic.name if topic else None
    return found


def _acknowledge(broker, group: ShareGroup, member_id: str, topics, names, batch: Changes) -> tuple[Answers, Undos]:
    """Apply the acknowledgement batches of a request: the answer of each partition, and how to
    undo those applied. The share-partitions changed go into ``batch``, to be persisted together."""
    results, undos = {}, {}
    for t in topics:
        name = names[t.topic_id]
        for p in t.partitions:
            if not p.acknowledgement_batches:
                continue
            error, message = ErrorCode.NONE, None
            if name is None or broker.log_manager.get_log(name, p.partition_index) is None:
                error, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic id {t.topic_id}"
            else:
                share_partition = broker.share.share_partition(group, name, p.partition_index)
                try:
                    undo = share_partition.acknowledge(member_id, [
                        (b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in p.acknowledgement_batches])
                    undos[(t.topic_id, p.partition_index)] = ((name, p.partition_index), share_partition, undo)
                    batch.acknowledged = True
                    broker.share.changed(group, name, p.partition_index, batch)
                except AcknowledgeError as exc:    # nothing changed
                    error, message = exc.code, str(exc)
            results[(t.topic_id, p.partition_index)] = (error, message)
    return results, undos


async def _settle(share: ShareCoordinator, group: ShareGroup, acked: Answers, undos: Undos,
                  written: Awaitable[object]) -> bool:
    """Await the acknowledgements' state write. If it failed (True), then, as Kafka, they are
    answered with its error and undone: their records are acquired by the member again."""
    error = await written
    if not error:
        return False
    for key in undos:
        acked[key] = (error, "cannot write the share-partition state: the acknowledgement is undone")
    await share.roll_back(group, list(undos.values()))
    return True


def _share_error(response_class, exc: ShareError, **fields):
    return response_class(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), responses=[],
                          node_endpoints=[], **fields)


async def share_fetch(broker, header, request):
    share = broker.share
    try:
        group = share.group(request.group_id or "")
        session = share.session(request.group_id, request.member_id, request.share_session_epoch)
    except ShareError as exc:
        return _share_error(ShareFetchResponse, exc, acquisition_lock_timeout_ms=0)
    names = _names(broker, request.topics)
    batch = Changes()
    acked, undos = _acknowledge(broker, group, request.member_id, request.topics, names, batch)
    acknowledged = share.persist(group, batch)    # written now: its fsync runs while records are acquired
    errors = {(t.topic_id, p.partition_index): ErrorCode.UNKNOWN_TOPIC_ID
              for t in request.topics if names[t.topic_id] is None for p in t.partitions}
    fetched: dict[TopicIdPartition, Fetched] = {}
    if session is None:
        share.release(group, request.member_id)
    else:
        for t in request.topics:
            if names[t.topic_id] is not None:
                session.partitions.update((names[t.topic_id], p.partition_index) for p in t.partitions)
        for t in request.forgotten_topics_data:
            topic = broker.log_manager.topic_by_id(t.topic_id)
            if topic is not None:
                session.partitions.difference_update((topic.name, p) for p in t.partitions)
        fetched, gone = await _acquire(broker, group, request, session, batch)
        errors.update(gone)
    # The acquisitions: written, not waited for, so not undone if the acknowledgements' write fails.
    await share.persist(group, batch)
    response = _fetch_response(broker, group, acked, fetched, errors)
    response.encode(share_fetch_response.VERSION)    # while the fsync runs; sent only after it
    if await _settle(share, group, acked, undos, acknowledged):
        if session is None:     # the records undone go back too
            share.release(group, request.member_id)
        response = _fetch_response(broker, group, acked, fetched, errors)
    return response


def _fetch_response(broker, group: ShareGroup, acked: Answers, fetched: dict[TopicIdPartition, Fetched],
                    errors: dict[TopicIdPartition, ErrorCode]) -> share_fetch_response.ShareFetchResponse:
    leader = broker.config.node_id
    by_topic: dict[uuid.UUID, list[SharePartitionData]] = {}
    for key in sorted(set(acked) | set(fetched) | set(errors), key=lambda k: (str(k[0]), k[1])):
        topic_id, partition = key
        runs, records = fetched.get(key, ([], b""))
        error, message = acked.get(key, (ErrorCode.NONE, None))
        by_topic.setdefault(topic_id, []).append(SharePartitionData(
            partition, errors.get(key, ErrorCode.NONE), None, error, message, leader, 0, records, runs))
    return share_fetch_response.ShareFetchResponse(
        0, 0, None, group.config.int("share.record.lock.duration.ms"),
        [ShareFetchedTopic(tid, ps) for tid, ps in by_topic.items()], [])


async def _acquire(broker, group: ShareGroup, request, session: ShareSession, batch: Changes
                   ) -> tuple[dict[TopicIdPartition, Fetched], dict[TopicIdPartition, ErrorCode]]:
    """Acquire up to MaxRecords and MaxBytes for the member, waiting up to MaxWaitMs for records
    to become available: (what was acquired, the session's partitions that no longer exist).
    The share-partitions changed go into ``batch``.
    A partition deleted during the wait ends it, answered with its error and out of the session."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    topics = broker.log_manager.topics
    watched = {tp: topics[tp[0]].topic_id for tp in sorted(session.partitions) if tp[0] in topics}
    while True:
        gone = {tp: _missing(broker, tp, topic_id) for tp, topic_id in watched.items()}
        gone = {tp: error for tp, error in gone.items() if error is not None}
        live = [tp for tp in watched if tp not in gone]
        with broker.wakeups.watch(live) as watch:
            fetched = _acquire_now(broker, group, request, live, batch)
            remaining = deadline - loop.time()
            if fetched or gone or remaining <= 0 or not live:
                session.partitions.difference_update(gone)
                return fetched, {(watched[tp], tp[1]): error for tp, error in gone.items()}
            await watch.wait(remaining)


def _missing(broker, tp: tuple[str, int], topic_id: uuid.UUID) -> ErrorCode | None:
    """Why a partition a session fetches from cannot be read any more (deleted, maybe re-created), or None."""
    topic = broker.log_manager.topics.get(tp[0])
    if topic is None or topic.topic_id != topic_id:
        return ErrorCode.UNKNOWN_TOPIC_ID
    return None if broker.log_manager.get_log(*tp) is not None else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def _acquire_now(broker, group: ShareGroup, request, live: list[tuple[str, int]],
                 batch: Changes) -> dict[TopicIdPartition, Fetched]:
    """Acquire what is available now, partition by partition, within MaxRecords and MaxBytes: only
    records of the whole batches that fit (the first batch whatever its size, so a fetch always
    progresses, as KIP-74 has it), and under read_committed only below the last stable offset.
    MaxRecords is a soft limit, as Kafka's (ShareFetch v1 acquires as its batch_optimized mode):
    it rounds up to the end of the log batch holding the last record it counts, so that a batch
    is sent once rather than once per MaxRecords of its records. So does the in-flight bound, as
    Kafka's: it caps the new records counted, not the batch they end in."""
    committed = group.config.get("share.isolation.level") == "read_committed"
    records_left, bytes_left = max(request.max_records, 1), request.max_bytes
    fetched: dict[TopicIdPartition, Fetched] = {}
    for topic, partition in live:
        if records_left <= 0 or (fetched and bytes_left <= 0):
            break
        plog = broker.log_manager.get_log(topic, partition)
        share_partition = broker.share.share_partition(group, topic, partition)
        first = share_partition.first_acquirable()
        reach = share_partition.offset_after(records_left)     # first == reach: the in-flight bound is full
        stable = (broker.txn_partitions.last_stable_offset(topic, partition, plog) if committed
                  else plog.log_end_offset)
        if first >= min(stable, reach):
            continue
        # read only what records_left can use (under read_committed, aborted runs it cannot count may lie between)
        chunk, batches, until = plog.read_batches(first, min(max(bytes_left, 0), PARTITION_MAX_BYTES),
                                                  min_one=not fetched, upto=stable, enough=None if committed else reach)
        if until == first:   # nothing read: no bytes left
            continue
        end_before = share_partition.end_offset
        limit = min(until, _batch_end(batches, reach - 1, until))
        runs = share_partition.acquire(request.member_id, limit - first, limit,
                                       _aborted(plog, batches, first, until) if committed else ())
        if runs or share_partition.end_offset != end_before:
            broker.share.changed(group, topic, partition, batch)
        if runs:
            records = _covering(chunk, batches, runs[0].first_offset, runs[-1].last_offset)
            records_left -= sum(r.last_offset - r.first_offset + 1 for r in runs)
            bytes_left -= len(records)
            fetched[(broker.log_manager.topics[topic].topic_id, partition)] = (runs, records)
    return fetched


def _aborted(plog, batches: list[tuple[int, BatchHeader]], first: int, until: int) -> list[tuple[int, int]]:
    """The offset ranges of the data batches of aborted transactions among ``batches``."""
    txns = plog.aborted_txns.between(first, until)
    return [(h.base_offset, h.last_offset) for _, h in batches if is_aborted(h, txns)]


def _batch_end(batches: list[tuple[int, BatchHeader]], offset: int, default: int) -> int:
    """The offset past the batch that holds ``offset`` (or the next batch, if it falls in a gap)."""
    return next((h.last_offset + 1 for _, h in batches if h.last_offset >= offset), default)


def _covering(chunk: bytes, batches: list[tuple[int, BatchHeader]], first: int, last: int) -> bytes:
    """The whole batches of ``chunk`` that hold offsets first..last (the client keeps the acquired ones)."""
    start = next(pos for pos, h in batches if h.last_offset >= first)
    end = max(pos + h.size for pos, h in batches if h.base_offset <= last)
    return chunk[start:end]


async def share_acknowledge(broker, header, request):
    share = broker.share
    try:
        if request.share_session_epoch == 0:
            raise ShareError(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session")
        group = share.group(request.group_id or "")
        session = share.session(request.group_id, request.member_id, request.share_session_epoch)
    except ShareError as exc:
        return _share_error(ShareAcknowledgeResponse, exc)
    names = _names(broker, request.topics)
    batch = Changes()
    acked, undos = _acknowledge(broker, group, request.member_id, request.topics, names, batch)
    await _settle(share, group, acked, undos, share.persist(group, batch))
    if session is None:
        share.release(group, request.member_id)
    Topic = ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse
    PartitionData = Topic.PartitionData
    by_topic: dict[uuid.UUID, list] = {}
    for (topic_id, partition), (error, message) in acked.items():
        by_topic.setdefault(topic_id, []).append(PartitionData(
            partition_index=partition, error_code=error, error_message=message,
            current_leader=PartitionData.LeaderIdAndEpoch(leader_id=broker.config.node_id, leader_epoch=0)))
    return ShareAcknowledgeResponse(throttle_time_ms=0, error_code=0, error_message=None,
                                    responses=[Topic(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
                                    node_endpoints=[])


def _share_rule(topic_result: type, **fields) -> Rule:
    """ShareFetch, ShareAcknowledge: READ on the group, then READ on each topic (named by id; an id the
    broker does not know is left to the handler to answer)."""
    def check(access, t):
        name = access.topic_name(t.topic_id)
        return None if name is None or access.topic(Op.READ, name) else TOPIC_DENIED

    def denial(t, code):
        Partition = topic_result.PartitionData
        return topic_result(topic_id=t.topic_id, partitions=partition_answers(
            Partition, "partition_index", (p.partition_index for p in t.partitions), error_code=code,
            error_message=NOT_AUTHORIZED, current_leader=Partition.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
            **fields))
    return group(Op.READ, per_resource("topics", check, "responses", denial))


share_fetch_rule = _share_rule(ShareFetchResponse.ShareFetchableTopicResponse, acknowledge_error_code=0, records=None,
                               acquired_records=[])
share_acknowledge_rule = _share_rule(ShareAcknowledgeResponse.ShareAcknowledgeTopicResponse)
