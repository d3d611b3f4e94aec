"""Share groups against what librdkafka's own suite expects of a broker: a topic deleted under a
waiting ShareFetch, ShareFetch's byte bound, the final acknowledgement of a closing consumer,
``share.isolation.level`` with real transactions, and Kafka's share assignor."""
from __future__ import annotations

import threading
import time
import uuid

from confluent_kafka import AcknowledgeType, Producer
from confluent_kafka.admin import AdminClient

from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_messages import (ShareAcknowledgeRequest, ShareFetchRequest,
                                               ShareGroupDescribeRequest, ShareGroupHeartbeatRequest)
from headwater.records import decode_records, iter_batches

from tests.broker.share.test_share_groups import _consumer, _names, _produce, _setup, _topic_id, share_broker  # noqa: F401
from tests.support.wire import Wire

FetchTopic = ShareFetchRequest.FetchTopic
FetchPartition = FetchTopic.FetchPartition
AckTopic = ShareAcknowledgeRequest.AcknowledgeTopic
AckPartition = AckTopic.AcknowledgePartition


def _join(wire: Wire, group: str, member: str, topic: str):
    return wire.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0, rack_id=None,
                                                   subscribed_topic_names=[topic]), 1)


def _fetch(wire: Wire, group: str, member: str, epoch: int, topic_id, *, acks=(), max_bytes=1 << 20,
           max_records=500, max_wait_ms=100, partitions=(0,)):
    batches = [FetchPartition.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[t])
               for f, l, t in acks]
    return wire.request(ShareFetchRequest(
        group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
        max_bytes=max_bytes, max_records=max_records, batch_size=max_records,
        topics=[FetchTopic(topic_id=topic_id, partitions=[
            FetchPartition(partition_index=p, acknowledgement_batches=batches if p == 0 else []) for p in partitions])],
        forgotten_topics_data=[]), 1)


def _acquired(partition) -> list[int]:
    return [o for r in partition.acquired_records for o in range(r.first_offset, r.last_offset + 1)]


def test_a_topic_deleted_during_a_share_fetch_long_poll_is_answered_and_the_connection_serves_on(share_broker):
    topic, group = _names("deleted")
    _setup(share_broker.bootstrap, topic, group)
    topic_id = _topic_id(share_broker.bootstrap, topic)
    wire = Wire(share_broker.bootstrap)
    assert _join(wire, group, "m1", topic).error_code == ErrorCode.NONE
    answer: dict = {}
    waiting = threading.Thread(target=lambda: answer.update(
        response=_fetch(wire, group, "m1", 0, topic_id, max_wait_ms=25_000)))
    waiting.start()
    time.sleep(1)         # the fetch is waiting for records (were it not yet, the topic is unknown to it: same answer)
    admin = AdminClient({"bootstrap.servers": share_broker.bootstrap})
    admin.delete_topics([topic])[topic].result()
    waiting.join(30)
    response = answer["response"]
    assert response.error_code == ErrorCode.NONE
    assert [(t.topic_id, [(p.partition_index, p.error_code, p.acquired_records) for p in t.partitions])
            for t in response.responses] == [(topic_id, [(0, ErrorCode.UNKNOWN_TOPIC_ID, [])])]
    # The same connection serves on, and the session no longer fetches from the deleted topic.
    assert _fetch(wire, group, "m1", 1, topic_id).responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID
    again = wire.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=1, rack_id=None,
                                                    subscribed_topic_names=None), 1)
    assert again.error_code == ErrorCode.NONE
    wire.close()


def test_share_fetch_honours_max_bytes_and_delivers_the_rest_later(share_broker):
    topic, group = _names("bytes")
    _setup(share_broker.bootstrap, topic, group)
    producer = Producer({"bootstrap.servers": share_broker.bootstrap, "linger.ms": 0})
    values = [f"{i:04d}".encode() * 100 for i in range(30)]          # 400 bytes each, one batch each
    for value in values:
        producer.produce(topic, value=value)
        producer.flush(30)
    topic_id = _topic_id(share_broker.bootstrap, topic)
    wire = Wire(share_broker.bootstrap)
    _join(wire, group, "m1", topic)
    # Smaller than one batch: the first batch still comes, alone, so the consumer progresses.
    first = _fetch(wire, group, "m1", 0, topic_id, max_bytes=10).responses[0].partitions[0]
    assert _acquired(first) == [0] and len(list(iter_batches(first.records, validate=False))) == 1
    received, acks, epoch, sizes = [], [(0, 0, 1)], 1, []
    received += [r.value for _, r in _records(first.records) if r.offset in _acquired(first)]
    while len(received) < len(values):
        partition = _fetch(wire, group, "m1", epoch, topic_id, acks=acks, max_bytes=1500).responses[0].partitions[0]
        epoch += 1
        offsets = _acquired(partition)
        assert partition.acknowledge_error_code == ErrorCode.NONE and offsets
        sizes.append(len(partition.records))
        in_batches = {r.offset: r.value for _, r in _records(partition.records)}
        assert set(offsets) <= set(in_batches)                    # nothing acquired that was not sent
        received += [in_batches[o] for o in offsets]
        acks = [(offsets[0], offsets[-1], 1)]
    assert received == values                                     # all, once, in order
    assert max(sizes) <= 1500 and len(sizes) > 1
    wire.close()


def _records(data: bytes):
    for position, _ in iter_batches(data, validate=False):
        header, records = decode_records(data, position)
        for record in records:
            yield header, record


def _member_of_batches(broker, prefix: str, sizes: tuple[int, ...]) -> tuple[str, uuid.UUID, Wire]:
    """A topic holding one log batch of each size and a share group whose member m1 has joined:
    the group, the topic's id, the member's connection."""
    topic, group = _names(prefix)
    _setup(broker.bootstrap, topic, group)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    # The partition known first: records produced before the client's metadata answer wait unassigned,
    # and under flush() they trickle out in as many batches as the moves (the full suite once had 10).
    producer.list_topics(topic, timeout=30)
    for size in sizes:
        for i in range(size):
            producer.produce(topic, value=b"v%d" % i)
        producer.flush(30)
    wire = Wire(broker.bootstrap)
    _join(wire, group, "m1", topic)
    return group, _topic_id(broker.bootstrap, topic), wire


def test_max_records_rounds_up_to_the_end_of_a_log_batch_as_kafka_does(share_broker):
    """ShareFetch v1 acquires as Kafka's batch_optimized mode: MaxRecords is a soft limit that
    rounds up to the end of the batch holding the last record it counts, so a batch is sent once."""
    group, topic_id, wire = _member_of_batches(share_broker, "soft", (7, 7, 6))   # batches 0..6, 7..13, 14..19
    rounds = []
    for epoch, max_records in enumerate((10, 1)):
        acks = [(rounds[-1][0], rounds[-1][-1], AcknowledgeType.ACCEPT.value)] if rounds else []
        partition = _fetch(wire, group, "m1", epoch, topic_id, acks=acks, max_records=max_records).responses[0].partitions[0]
        rounds.append(_acquired(partition))
        # ground truth: the offsets up to the end of the batch that holds the MaxRecords-th record
        bounds = [(h.base_offset, h.last_offset) for _, h in iter_batches(partition.records)]
        first = bounds[0][0]
        last = next(end for base, end in bounds if base <= first + max_records - 1 <= end)
        assert rounds[-1] == list(range(first, last + 1))
    assert rounds == [list(range(0, 14)), list(range(14, 20))]
    wire.close()


def test_the_in_flight_bound_rounds_up_to_the_end_of_a_log_batch_as_kafka_does(share_broker):
    """Kafka caps the new records a fetch counts at the room left under the in-flight bound
    (group.share.partition.max.record.locks, 2,000) and rounds that up to a batch end, as it does
    MaxRecords: a batch is sent once, whatever its size, and a full window acquires nothing new."""
    from headwater.broker.share.partition import MAX_IN_FLIGHT
    size = MAX_IN_FLIGHT * 3 // 4                 # batches 0..1499, 1500..2999, 3000..4499
    group, topic_id, wire = _member_of_batches(share_broker, "locks", (size, size, size))

    def fetch(epoch: int, acks=()) -> tuple[list[int], list[tuple[int, int]]]:
        response = _fetch(wire, group, "m1", epoch, topic_id, acks=acks, max_records=MAX_IN_FLIGHT, max_wait_ms=10)
        partitions = [p for t in response.responses for p in t.partitions]       # none: nothing acquired
        assert all(p.acknowledge_error_code == ErrorCode.NONE for p in partitions)
        return ([o for p in partitions for o in _acquired(p)],
                [(h.base_offset, h.last_offset) for p in partitions for _, h in iter_batches(p.records)])

    # MaxRecords 2,000 reaches into the second batch: both whole, 3,000 records in flight
    assert fetch(0) == (list(range(0, 2 * size)), [(0, size - 1), (size, 2 * size - 1)])
    assert fetch(1) == ([], [])                   # the window is full
    # 1,500 in flight once the first batch is done: room for 500, rounded up to the third batch's end
    assert fetch(2, acks=[(0, size - 1, AcknowledgeType.ACCEPT.value)]) == (
        list(range(2 * size, 3 * size)), [(2 * size, 3 * size - 1)])
    wire.close()


def test_a_final_acknowledgement_that_arrives_after_the_leave_counts(share_broker):
    topic, group = _names("final")
    _setup(share_broker.bootstrap, topic, group)
    _produce(share_broker.bootstrap, topic, [b"a", b"b", b"c"])
    topic_id = _topic_id(share_broker.bootstrap, topic)
    coordinator, fetcher = Wire(share_broker.bootstrap), Wire(share_broker.bootstrap)
    _join(coordinator, group, "m1", topic)
    assert _acquired(_fetch(fetcher, group, "m1", 0, topic_id).responses[0].partitions[0]) == [0, 1, 2]
    left = coordinator.request(ShareGroupHeartbeatRequest(group_id=group, member_id="m1", member_epoch=-1,
                                                          rack_id=None, subscribed_topic_names=None), 1)
    assert left.error_code == ErrorCode.NONE
    final = fetcher.request(ShareAcknowledgeRequest(group_id=group, member_id="m1", share_session_epoch=-1, topics=[
        AckTopic(topic_id=topic_id, partitions=[AckPartition(partition_index=0, acknowledgement_batches=[
            AckPartition.AcknowledgementBatch(first_offset=0, last_offset=1, acknowledge_types=[1])])])]), 1)
    assert final.error_code == ErrorCode.NONE and final.responses[0].partitions[0].error_code == ErrorCode.NONE
    # The other member gets only what m1 did not accept (released when its session closed).
    _join(coordinator, group, "m2", topic)
    assert _acquired(_fetch(fetcher, group, "m2", 0, topic_id).responses[0].partitions[0]) == [2]
    coordinator.close()
    fetcher.close()


def test_share_consumers_that_acknowledge_and_close_never_see_their_records_again(share_broker):
    """Each consumer accepts what it polled and closes: the acknowledgement rides on the close,
    racing the leaving heartbeat on another connection. No record may come twice."""
    topic, group = _names("closing")
    _setup(share_broker.bootstrap, topic, group)
    values = [f"c{i}".encode() for i in range(40)]
    _produce(share_broker.bootstrap, topic, values)
    received: list[bytes] = []
    deadline = time.monotonic() + 120
    while len(received) < len(values) and time.monotonic() < deadline:
        consumer = _consumer(share_broker.bootstrap, group, topic,
                             **{"share.acknowledgement.mode": "explicit", "max.poll.records": 5})
        messages: list = []
        while not messages and time.monotonic() < deadline:
            messages = [m for m in consumer.poll(0.5) if not m.error()]
        for m in messages:
            consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        received += [m.value() for m in messages]
        consumer.close()
    assert sorted(received) == sorted(values)


def test_share_isolation_level_read_committed_skips_aborted_and_open_transactions(share_broker):
    topic, group = _names("isolation")
    _setup(share_broker.bootstrap, topic, group, **{"share.isolation.level": "read_committed"})
    committed, aborted, pending = [b"c1", b"c2"], [b"a1", b"a2"], [b"o1", b"o2"]
    producer = Producer({"bootstrap.servers": share_broker.bootstrap, "transactional.id": "tx-" + uuid.uuid4().hex})
    producer.init_transactions(30)
    for batch, commit in ((committed[:1], True), (aborted, False), (committed[1:], True)):
        producer.begin_transaction()
        for value in batch:
            producer.produce(topic, value=value)
        producer.flush(30)
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    producer.begin_transaction()
    for value in pending:
        producer.produce(topic, value=value)
    producer.flush(30)
    _produce(share_broker.bootstrap, topic, [b"plain"])       # past the last stable offset while o1, o2 are open
    consumer = _consumer(share_broker.bootstrap, group, topic)
    got = _poll_until(consumer, len(committed))
    got += _poll_for(consumer, 2)                              # nothing more is deliverable yet
    assert sorted(got) == sorted(committed)
    producer.commit_transaction(30)
    got += _poll_until(consumer, len(pending) + 1)
    consumer.close()
    assert sorted(got) == sorted(committed + pending + [b"plain"])   # never an aborted record


def _poll_until(consumer, count: int, timeout: float = 30) -> list[bytes]:
    got, deadline = [], time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [m.value() for m in consumer.poll(0.3) if not m.error()]
    return got


def _poll_for(consumer, seconds: float) -> list[bytes]:
    got, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        got += [m.value() for m in consumer.poll(0.3) if not m.error()]
    return got


def test_share_consumers_split_the_partitions_as_kafka_assigns_them(share_broker):
    topic, group = _names("assign")
    _setup(share_broker.bootstrap, topic, group, 4, **{"share.heartbeat.interval.ms": "1000"})
    consumers = [_consumer(share_broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
                 for _ in range(3)]
    try:
        described = _settled_assignment(share_broker.bootstrap, group, consumers)
        # Four partitions over three members: each partition to one member, counts 2, 1, 1.
        assert sorted(p for ps in described.values() for p in ps) == [0, 1, 2, 3]
        assert sorted(map(len, described.values())) == [1, 1, 2]
        producer = Producer({"bootstrap.servers": share_broker.bootstrap})
        values = [f"v{i}".encode() for i in range(80)]
        for i, value in enumerate(values):
            producer.produce(topic, value=value, partition=i % 4)
        producer.flush(30)
        received: list[bytes] = []
        by_consumer: dict[int, set[int]] = {i: set() for i in range(3)}
        deadline = time.monotonic() + 60
        while len(received) < len(values) and time.monotonic() < deadline:
            for i, consumer in enumerate(consumers):
                for m in consumer.poll(0.2):
                    if not m.error():
                        consumer.acknowledge(m, AcknowledgeType.ACCEPT)
                        received.append(m.value())
                        by_consumer[i].add(m.partition())
    finally:
        for consumer in consumers:
            consumer.close()
    assert sorted(received) == sorted(values)                    # every record exactly once
    assert sorted(map(len, by_consumer.values())) == [1, 1, 2]   # each consumer on its own partitions only


def _settled_assignment(bootstrap: str, group: str, consumers, timeout: float = 60) -> dict[str, list[int]]:
    """Member -> partitions, by ShareGroupDescribe, once all three members have their share (or the timeout)."""
    wire = Wire(bootstrap)
    deadline = time.monotonic() + timeout
    while True:
        for consumer in consumers:
            consumer.poll(0.1)
        group_state = wire.request(ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
                                   1).groups[0]
        assert group_state.assignor_name == "simple"
        assignment = {m.member_id: sorted(p for t in m.assignment.topic_partitions for p in t.partitions)
                      for m in group_state.members}
        if (len(assignment) == len(consumers) and sorted(map(len, assignment.values())) == [1, 1, 2]) \
                or time.monotonic() > deadline:
            wire.close()
            return assignment
