"""Share groups (KIP-932) with confluent-kafka's ShareConsumer against a real broker: records
split among consumers, redelivery after a worker dies, release, reject, dead letters; and,
with raw requests where the preview client cannot be made to misbehave, Kafka's error codes."""
from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType, Consumer, Producer, ShareConsumer, TopicPartition
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions,
                                   NewTopic, ResourceType)

from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_messages import ShareAcknowledgeRequest, ShareFetchRequest, ShareGroupHeartbeatRequest
from headwater.testing import BrokerProcess

from tests.support.wire import Wire

LOCK_MS = 1500


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("share") / "data", "--num-partitions", "1").start()
    yield proc
    proc.stop()


def _setup(bootstrap: str, topic: str, group: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions)])[topic].result()
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
               for name, value in {"share.auto.offset.reset": "earliest", **configs}.items()]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group,
                                                                  incremental_configs=entries)]).values():
        future.result()


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    """A batch per record: a ShareFetch acquires whole batches (MaxRecords rounds up to a batch's
    end, as Kafka's), and these tests hand records out a few at a time."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1})
    for value in values:
        producer.produce(topic, value=value)
    producer.flush(30)


def _consumer(bootstrap: str, group: str, topic: str, **configs) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, **configs})
    consumer.subscribe([topic])
    return consumer


def _names(prefix: str) -> tuple[str, str]:
    suffix = uuid.uuid4().hex[:8]
    return f"{prefix}-{suffix}", f"{prefix}-group-{suffix}"


def test_consumers_on_one_partition_get_distinct_records_and_all_are_processed(share_broker):
    topic, group = _names("split")
    _setup(share_broker.bootstrap, topic, group)
    values = [f"m{i}".encode() for i in range(60)]
    _produce(share_broker.bootstrap, topic, values)
    consumers = [_consumer(share_broker.bootstrap, group, topic, **{"max.poll.records": 5}) for _ in range(3)]
    got: dict[int, list[bytes]] = {i: [] for i in range(3)}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < len(values) and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):   # implicit mode: the next poll accepts these
            got[i] += [m.value() for m in consumer.poll(0.2) if not m.error()]
    for consumer in consumers:
        consumer.close()
    everything = [v for vs in got.values() for v in vs]
    assert sorted(everything) == sorted(values)          # every record, none twice
    assert sum(1 for vs in got.values() if vs) > 1       # the partition was shared


def test_records_held_by_a_killed_worker_reach_another_consumer_with_delivery_count_2(share_broker, tmp_path):
    topic, group = _names("killed")
    _setup(share_broker.bootstrap, topic, group, **{"share.record.lock.duration.ms": str(LOCK_MS)})
    _produce(share_broker.bootstrap, topic, [f"job{i}".encode() for i in range(5)])
    out = tmp_path / "held"
    worker = subprocess.Popen([sys.executable, "-m", "tests.support.share_worker", "--bootstrap",
                               share_broker.bootstrap, "--group", group, "--topic", topic, "--out", str(out)],
                              cwd=Path(__file__).parents[3], env=os.environ)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().endswith("\n")) and time.monotonic() < deadline:
            time.sleep(0.1)
        held = {int(line.split()[0]): int(line.split()[1]) for line in out.read_text().splitlines()}
        assert held and set(held.values()) == {1}
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    consumer = _consumer(share_broker.bootstrap, group, topic)
    redelivered = {}
    deadline = time.monotonic() + 60
    while len(redelivered) < 5 and time.monotonic() < deadline:
        redelivered.update((m.offset(), m.delivery_count()) for m in consumer.poll(0.5) if not m.error())
    consumer.close()
    assert {o: redelivered[o] for o in held} == {o: 2 for o in held}


def test_release_reject_and_the_delivery_limit_dead_letter_a_poison_record(share_broker):
    topic, group = _names("poison")
    dlq = topic + "-dlq"
    admin = AdminClient({"bootstrap.servers": share_broker.bootstrap})
    admin.create_topics([NewTopic(dlq, 1)])[dlq].result()
    _setup(share_broker.bootstrap, topic, group, **{"errors.deadletterqueue.topic.name": dlq,
                                                    "errors.deadletterqueue.copy.record.enable": "true"})
    assert _headwater(share_broker, "groups", "alter", group, "--config", "share.delivery.count.limit=3", "--json") \
        == [{"group": group, "config": "share.delivery.count.limit", "value": "3"}]
    refused = subprocess.run([sys.executable, "-m", "headwater", "groups", "alter", group, "--config",
                              "share.delivery.count.limit=1", "--bootstrap-server", share_broker.bootstrap],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "share.delivery.count.limit must be an integer of at least 2" in refused.stderr
    _produce(share_broker.bootstrap, topic, [b"good", b"poison", b"rejected"])
    consumer = _consumer(share_broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit"})
    deliveries: list[tuple[bytes, int]] = []
    deadline = time.monotonic() + 60
    while sum(1 for v, _ in deliveries if v == b"poison") < 3 and time.monotonic() < deadline:
        for m in consumer.poll(0.3):
            if m.error():
                continue
            deliveries.append((m.value(), m.delivery_count()))
            kind = {b"good": AcknowledgeType.ACCEPT, b"poison": AcknowledgeType.RELEASE}.get(
                m.value(), AcknowledgeType.REJECT)
            consumer.acknowledge(m, kind)
        consumer.commit_sync()
    late = [m.value() for m in consumer.poll(2.0) if not m.error()]  # nothing left to deliver
    consumer.close()
    assert late == []
    assert sorted(deliveries) == [(b"good", 1), (b"poison", 1), (b"poison", 2), (b"poison", 3), (b"rejected", 1)]
    letters = _read_all(share_broker.bootstrap, dlq, 2)
    assert [(m.value(), dict(m.headers())["__dlq.errors.delivery.count"]) for m in letters] == [
        (b"poison", b"3"), (b"rejected", b"1")] or [(m.value(), dict(m.headers())["__dlq.errors.delivery.count"])
                                                    for m in letters] == [(b"rejected", b"1"), (b"poison", b"3")]
    for m in letters:
        headers = dict(m.headers())
        assert headers["__dlq.errors.topic"] == topic.encode()
        assert headers["__dlq.errors.partition"] == b"0"
        assert headers["__dlq.errors.group"] == group.encode()
        assert headers["__dlq.errors.offset"] == {b"poison": b"1", b"rejected": b"2"}[m.value()]
        assert headers["__dlq.errors.message"]
    # Re-drive: the dead letters go back to the source topic, once.
    assert _headwater(share_broker, "groups", "redrive", dlq, "--json") == [{"topic": topic, "redriven": 2}]
    assert _headwater(share_broker, "groups", "redrive", dlq, "--json") == []
    again = _cli(share_broker, "groups", "redrive", dlq)
    assert (again.returncode, again.stdout) == (0, "") and "nothing to re-drive" in again.stderr
    assert sorted(m.value() for m in _read_all(share_broker.bootstrap, topic, 5)[3:]) == [b"poison", b"rejected"]
    described = _headwater(share_broker, "groups", "describe", group, "--json")
    assert described["type"] == "share" and described["members"] == []
    assert described["partitions"] == [{"topic": topic, "partition": 0, "start_offset": 3, "log_end_offset": 5,
                                        "lag": 2, "in_flight": 0, "available": 2, "archived": 2, "dead_lettered": 2}]
    configs = {c["config"]: c["value"] for c in described["configs"]}
    assert configs["share.delivery.count.limit"] == "3"
    assert configs["share.record.lock.duration.ms"] == "30000"            # Kafka's default
    listed = _headwater(share_broker, "groups", "list", "--json")
    assert {"group": group, "type": "share", "state": "empty"} in listed
    assert _headwater(share_broker, "groups", "delete", group, "--json") == [{"group": group, "deleted": True}]
    gone = subprocess.run([sys.executable, "-m", "headwater", "groups", "describe", group, "--bootstrap-server",
                           share_broker.bootstrap], capture_output=True, text=True, timeout=120)
    assert gone.returncode == 1 and f"group {group!r} does not exist" in gone.stderr


def _cli(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args, "--bootstrap-server", broker.bootstrap],
                          capture_output=True, text=True, timeout=120)


def _headwater(broker, *args: str):
    done = _cli(broker, *args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_redriving_a_topic_that_is_not_a_dead_letter_topic_is_refused_and_leaves_no_group(share_broker):
    topic, _ = _names("plain")
    _produce(share_broker.bootstrap, topic, [b"not a dead letter"])
    refused = _cli(share_broker, "groups", "redrive", topic)
    assert refused.returncode == 1 and f"{topic}-0@0 is not a dead letter" in refused.stderr
    listed = {g["group"] for g in _headwater(share_broker, "groups", "list", "--json")}
    assert f"headwater-redrive-{topic}" not in listed


def test_share_group_lag_counts_partitions_never_fetched(share_broker):
    """A partition added after the group last fetched: its records wait for the group (earliest)."""
    topic, group = _names("grown")
    _setup(share_broker.bootstrap, topic, group)
    _produce(share_broker.bootstrap, topic, [b"a", b"b", b"c"])
    consumer = _consumer(share_broker.bootstrap, group, topic)
    got, deadline = [], time.monotonic() + 60
    while len(got) < 3 and time.monotonic() < deadline:
        got += [m for m in consumer.poll(0.2) if not m.error()]
    consumer.poll(0.5)  # implicit mode: this poll acknowledges the three
    consumer.close()
    admin = AdminClient({"bootstrap.servers": share_broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
    producer = Producer({"bootstrap.servers": share_broker.bootstrap})
    for i in range(4):
        producer.produce(topic, value=b"%d" % i, partition=1)
    assert producer.flush(30) == 0
    described = _headwater(share_broker, "groups", "describe", group, "--json")
    lags = {p["partition"]: p["lag"] for p in described["partitions"]}
    assert len(got) == 3 and lags == {0: 0, 1: 4} and described["lag"] == 4


def _read_all(bootstrap: str, topic: str, count: int) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader-" + uuid.uuid4().hex,
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m)
    consumer.close()
    return got


def test_bad_share_requests_get_kafka_error_codes_and_the_broker_keeps_serving(share_broker):
    topic, group = _names("bad")
    _setup(share_broker.bootstrap, topic, group)
    _produce(share_broker.bootstrap, topic, [b"a", b"b"])
    wire = Wire(share_broker.bootstrap)
    topic_id = _topic_id(share_broker.bootstrap, topic)
    Fetch = ShareFetchRequest
    FetchTopic, FetchPartition = Fetch.FetchTopic, Fetch.FetchTopic.FetchPartition

    def fetch(member, epoch, acks=()):
        batches = [FetchPartition.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[t])
                   for f, l, t in acks]
        return wire.request(Fetch(group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=100,
                                  min_bytes=1, max_bytes=1 << 20, max_records=1, batch_size=1,
                                  topics=[FetchTopic(topic_id=topic_id, partitions=[
                                      FetchPartition(partition_index=0, acknowledgement_batches=batches)])],
                                  forgotten_topics_data=[]), 1)

    def heartbeat(group_id, member, epoch):
        return wire.request(ShareGroupHeartbeatRequest(group_id=group_id, member_id=member, member_epoch=epoch,
                                                       rack_id=None, subscribed_topic_names=[topic]), 1)

    assert fetch("nobody", 0).error_code == ErrorCode.GROUP_ID_NOT_FOUND      # unknown group
    assert heartbeat(group, "m1", 0).member_epoch == 1
    assert heartbeat(group, "m2", 0).member_epoch == 1
    assert heartbeat(group, "m1", 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
    assert fetch("m1", 3).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
    first = fetch("m1", 0)
    assert [(r.first_offset, r.last_offset, r.delivery_count)
            for r in first.responses[0].partitions[0].acquired_records] == [(0, 0, 1)]
    assert fetch("m1", 5).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    fetch("m2", 0)                                                               # m2 acquires offset 1
    # m1 acknowledges m2's record and an offset past the log end: refused, nothing changes.
    for acks in ([(1, 1, 1)], [(0, 9, 1)]):
        refused = fetch("m1", 1 if acks[0][1] == 1 else 2, acks)
        assert refused.responses[0].partitions[0].acknowledge_error_code == ErrorCode.INVALID_RECORD_STATE
    ack = wire.request(ShareAcknowledgeRequest(group_id=group, member_id="m1", share_session_epoch=3, topics=[
        ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[
            ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition.AcknowledgementBatch(
                    first_offset=0, last_offset=0, acknowledge_types=[1])])])]), 1)
    assert ack.responses[0].partitions[0].error_code == ErrorCode.NONE            # m1's own record: accepted
    # A classic group's id cannot be used for a share group.
    classic = Consumer({"bootstrap.servers": share_broker.bootstrap, "group.id": group + "-classic"})
    classic.subscribe([topic])
    deadline = time.monotonic() + 30
    while not classic.assignment() and time.monotonic() < deadline:
        classic.poll(0.2)
    assert heartbeat(group + "-classic", "m9", 0).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    classic.close()


def _topic_id(bootstrap: str, topic: str) -> uuid.UUID:
    from kafka.protocol.metadata import MetadataRequest
    wire = Wire(bootstrap)
    response = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)],
                                            allow_auto_topic_creation=False), 12)
    return response.topics[0].topic_id


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_broker_restart_loses_nothing_and_redelivers_nothing_acknowledged(start_broker, how):
    broker = start_broker("--num-partitions", "1")
    topic, group = _names("restart")
    _setup(broker.bootstrap, topic, group)
    values = {f"r{i}".encode() for i in range(40)}
    _produce(broker.bootstrap, topic, sorted(values))
    first = _consumer(broker.bootstrap, group, topic, **{"share.acknowledgement.mode": "explicit",
                                                         "max.poll.records": 5})
    acknowledged: set[bytes] = set()
    held: list[bytes] = []
    deadline = time.monotonic() + 60
    while not held and time.monotonic() < deadline:
        messages = [m for m in first.poll(0.3) if not m.error()]
        if len(acknowledged) >= 20:          # in the middle of the workload: these stay unacknowledged
            held = [m.value() for m in messages]
            continue
        for m in messages:
            first.acknowledge(m)
        if all(error is None for error in first.commit_sync().values()):
            acknowledged.update(m.value() for m in messages)
    assert held
    topic_id = _topic_id(broker.bootstrap, topic)
    getattr(broker, how)()
    broker.restart()
    assert _topic_id(broker.bootstrap, topic) == topic_id
    second = _consumer(broker.bootstrap, group, topic)
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    while len(received) < len(values - acknowledged) and time.monotonic() < deadline:
        received += [m.value() for m in second.poll(0.3) if not m.error()]
    second.close()
    first.close()
    assert set(received) == values - acknowledged          # nothing lost
    assert not set(received) & acknowledged                # nothing acknowledged delivered again
    assert set(held) <= set(received)


def test_a_classic_group_and_a_share_group_on_one_topic_do_not_interfere(share_broker):
    topic, group = _names("both")
    _setup(share_broker.bootstrap, topic, group)
    values = sorted(f"v{i}".encode() for i in range(20))
    _produce(share_broker.bootstrap, topic, values)
    share = _consumer(share_broker.bootstrap, group, topic)
    classic = Consumer({"bootstrap.servers": share_broker.bootstrap, "group.id": group + "-classic",
                        "auto.offset.reset": "earliest"})
    classic.subscribe([topic])
    shared, read = [], []
    deadline = time.monotonic() + 60
    while (len(shared) < 20 or len(read) < 20) and time.monotonic() < deadline:
        shared += [m.value() for m in share.poll(0.2) if not m.error()]
        m = classic.poll(0.2)
        if m is not None and not m.error():
            read.append(m.value())
    classic.commit(asynchronous=False)
    share.close()
    committed = classic.committed([TopicPartition(topic, 0)], timeout=10)[0].offset
    classic.close()
    assert sorted(shared) == values and sorted(read) == values   # each group sees every record once
    assert committed == 20


def test_share_group_offsets_apis_refuse_a_group_with_members_and_bad_partitions(share_broker):
    """AlterShareGroupOffsets and DeleteShareGroupOffsets need an empty group (NON_EMPTY_GROUP, as
    Kafka); an unknown partition or a negative offset is answered for that partition alone."""
    from headwater.protocol.share_messages import (AlterShareGroupOffsetsRequest, DeleteShareGroupOffsetsRequest,
                                                   DescribeShareGroupOffsetsRequest)
    topic, group = _names("offsets-api")
    _setup(share_broker.bootstrap, topic, group)
    _produce(share_broker.bootstrap, topic, [b"a", b"b", b"c"])
    Alter = AlterShareGroupOffsetsRequest
    AlterTopic, AlterPartition = Alter.AlterShareGroupOffsetsRequestTopic, \
        Alter.AlterShareGroupOffsetsRequestTopic.AlterShareGroupOffsetsRequestPartition
    Describe = DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup
    wire = Wire(share_broker.bootstrap)

    def alter(*offsets):
        return wire.request(Alter(group_id=group, topics=[AlterTopic(topic_name=t, partitions=[
            AlterPartition(partition_index=p, start_offset=o)]) for t, p, o in offsets]), 0)

    def delete():
        return wire.request(DeleteShareGroupOffsetsRequest(group_id=group, topics=[
            DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]), 0)

    def describe(group_id):
        [answer] = wire.request(DescribeShareGroupOffsetsRequest(groups=[Describe(group_id=group_id, topics=None)]),
                                1).groups
        return answer.error_code, {p.partition_index: (p.start_offset, p.lag) for t in answer.topics
                                   for p in t.partitions}

    try:
        assert describe("no-such-share-group")[0] == ErrorCode.GROUP_ID_NOT_FOUND
        consumer = _consumer(share_broker.bootstrap, group, topic)
        got, deadline = [], time.monotonic() + 30
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m for m in consumer.poll(0.5) if not m.error()]
        assert (alter((topic, 0, 0)).error_code, delete().error_code) == (ErrorCode.NON_EMPTY_GROUP,) * 2
        consumer.close()
        assert alter((topic, 0, -4)).responses[0].partitions[0].error_code == ErrorCode.INVALID_REQUEST
        answer = alter((topic, 0, 1), (topic, 5, 0), ("no-such-topic", 0, 0))
        assert answer.error_code == 0
        assert [[p.error_code for p in t.partitions] for t in answer.responses] == [
            [0], [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION], [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]]
        assert describe(group) == (0, {0: (1, 2)})
        assert delete().error_code == 0 and describe(group) == (0, {})
    finally:
        wire.close()


@pytest.mark.parametrize("how", ["release", "lock expiry"])
def test_a_waiting_share_fetch_gets_a_released_or_expired_record_before_its_max_wait(share_broker, how):
    """m1 holds the only record; m2's ShareFetch waits up to 10 s for one. A release, or the lock
    expiring, wakes it: its connection's timeout (5 s) is shorter than the max wait, so a fetch
    that waited out its max wait fails the test."""
    topic, group = _names("wake")
    _setup(share_broker.bootstrap, topic, group, **{"share.record.lock.duration.ms": "1000"})
    _produce(share_broker.bootstrap, topic, [b"only"])
    topic_id = _topic_id(share_broker.bootstrap, topic)
    m1, m2 = Wire(share_broker.bootstrap), Wire(share_broker.bootstrap, timeout=5)
    FetchTopic, FetchPartition = ShareFetchRequest.FetchTopic, ShareFetchRequest.FetchTopic.FetchPartition

    def fetch(wire, member, epoch, max_wait_ms):
        return wire.request(ShareFetchRequest(
            group_id=group, member_id=member, share_session_epoch=epoch, max_wait_ms=max_wait_ms, min_bytes=1,
            max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=[],
            topics=[FetchTopic(topic_id=topic_id, partitions=[FetchPartition(partition_index=0,
                                                                             acknowledgement_batches=[])])]), 1)

    for member in ("m1", "m2"):
        m1.request(ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=0, rack_id=None,
                                              subscribed_topic_names=[topic]), 1)
    acquired = fetch(m1, "m1", 0, 500).responses[0].partitions[0].acquired_records
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in acquired] == [(0, 0, 1)]
    waiting = concurrent.futures.ThreadPoolExecutor(1).submit(fetch, m2, "m2", 0, 10_000)
    time.sleep(0.3)    # let m2's fetch start waiting (if it has not, it finds the record at once: still a pass)
    if how == "release":
        Ack = ShareAcknowledgeRequest.AcknowledgeTopic
        released = m1.request(ShareAcknowledgeRequest(group_id=group, member_id="m1", share_session_epoch=1, topics=[
            Ack(topic_id=topic_id, partitions=[Ack.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                Ack.AcknowledgePartition.AcknowledgementBatch(first_offset=0, last_offset=0,
                                                              acknowledge_types=[2])])])]), 1)
        assert released.responses[0].partitions[0].error_code == ErrorCode.NONE
    got = waiting.result().responses[0].partitions[0].acquired_records
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [(0, 0, 2)]
    m1.close()
    m2.close()
