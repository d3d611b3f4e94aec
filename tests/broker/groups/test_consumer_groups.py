"""Consumer groups on KIP-848's protocol (``group.protocol=consumer``) with real confluent-kafka
consumers: the broker assigns the partitions, members come, leave and die, every produced record
is processed and committed; ConsumerGroupDescribe shows the group through AdminClient. The
frame-level tests send what no client sends on purpose (a stale member epoch, a mixed group id).
The state machine underneath is stepped in-process in tests/broker/groups/test_consumer_group.py."""
import threading
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupType

from headwater.protocol.consumer_group_messages import ConsumerGroupHeartbeatRequest
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

from tests.support.groups import MemberProcess, admin, committed, create_topic, describe, wait_for, wait_stable
from tests.broker.groups.test_groups import log_end_offsets, produce_numbered
from tests.broker.groups.test_groups_protocol import Client as ClassicMember
from tests.support.wire import Wire

SESSION_MS = 6000   # the broker's group.consumer.session.timeout.ms here, so a killed member is fenced soon
OffsetCommitRequest = MESSAGE_CLASSES[ApiKey.OFFSET_COMMIT][0]
OffsetDeleteRequest = MESSAGE_CLASSES[ApiKey.OFFSET_DELETE][0]
OffsetFetchRequest = MESSAGE_CLASSES[ApiKey.OFFSET_FETCH][0]


@pytest.fixture
def broker(start_broker):
    return start_broker("--group-consumer-session-timeout-ms", str(SESSION_MS),
                        "--group-consumer-heartbeat-interval-ms", "500")


def member(broker, tmp_path, name, assignor="uniform"):
    return MemberProcess(broker.bootstrap, "inventory", "orders", "confluent", tmp_path / f"{name}.txt",
                         group_protocol="consumer", assignor=assignor)


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_come_leave_and_die_and_every_record_is_processed(broker, tmp_path, assignor):
    create_topic(broker.bootstrap, "orders", 6)
    members = [member(broker, tmp_path, f"m{i}", assignor) for i in range(3)]
    owned = wait_stable(broker, "inventory", 3, 6)
    assert sorted(len(ps) for ps in owned.values()) == [2, 2, 2]
    truth = produce_numbered(broker.bootstrap, "orders", 300)
    wait_for(lambda: len({r for m in members for r in m.records()}) >= len(truth), message="all processed")

    members[0].stop()                                    # leaves (MemberEpoch -1): its partitions move at once
    wait_stable(broker, "inventory", 2, 6)
    truth.update(produce_numbered(broker.bootstrap, "orders", 300, start=300))
    wait_for(lambda: len({r for m in members for r in m.records()}) >= len(truth), message="all processed")

    members[1].kill()                                    # dies: fenced after the session timeout
    survivors = wait_stable(broker, "inventory", 1, 6, timeout=SESSION_MS / 1000 + 60)
    assert list(survivors.values()) == [set(range(6))]
    truth.update(produce_numbered(broker.bootstrap, "orders", 300, start=600))
    wait_for(lambda: len({r for m in members for r in m.records()}) >= len(truth), message="all processed")
    members[2].stop()

    processed = {r for m in members for r in m.records()}
    assert processed == {(p, o, v) for (p, o), v in truth.items()}      # nothing lost, nothing invented
    assert committed(broker.bootstrap, "inventory", "orders", range(6)) == log_end_offsets(truth)


class Watched:
    """A confluent-kafka consumer (``group.protocol=consumer``) polled on a thread of its own,
    noting every record it reads, the partitions it holds, and every one it has revoked or loses."""

    def __init__(self, bootstrap: str, group: str, topic: str):
        self.records: list[tuple[int, int, str]] = []
        self.assigned: set[int] = set()
        self.revoked: list[int] = []
        self.lost: list[int] = []
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                                  "auto.offset.reset": "earliest"})
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke,
                                on_lost=self._on_lost)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _on_assign(self, consumer, partitions):
        self.assigned |= {tp.partition for tp in partitions}

    def _on_revoke(self, consumer, partitions):
        self.revoked += [tp.partition for tp in partitions]
        self.assigned -= {tp.partition for tp in partitions}

    def _on_lost(self, consumer, partitions):
        self.lost += [tp.partition for tp in partitions]
        self.assigned -= {tp.partition for tp in partitions}

    def _poll(self):
        while not self._stopping.is_set():
            msg = self.consumer.poll(0.1)
            if msg is not None and not msg.error():
                self.records.append((msg.partition(), msg.offset(), msg.value().decode()))

    def close(self):
        self._stopping.set()
        self._thread.join()
        self.consumer.close()


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_members_keep_their_partitions_across_a_broker_restart(broker, how):
    """Membership is in __consumer_offsets: after a clean stop or a crash the restarted broker
    knows the members, their epochs and assignments, and their next heartbeats go on as before:
    no partition is revoked or lost, and each partition's records go to its one owner."""
    create_topic(broker.bootstrap, "orders", 4)
    members = [Watched(broker.bootstrap, "inventory", "orders") for _ in range(2)]
    try:
        before = wait_stable(broker, "inventory", 2, 4)
        wait_for(lambda: sorted(len(m.assigned) for m in members) == [2, 2], message="two partitions each")
        owner = {p: m for m in members for p in m.assigned}
        truth = produce_numbered(broker.bootstrap, "orders", 200)
        wait_for(lambda: sum(len(m.records) for m in members) >= len(truth), message="all read")
        for m in members:   # the first assignment moved partitions from the first member to the second
            m.revoked.clear()
        broker.stop() if how == "stop" else broker.kill()
        broker.restart()
        assert wait_stable(broker, "inventory", 2, 4) == before         # the same member ids and partitions
        truth.update(produce_numbered(broker.bootstrap, "orders", 200, start=200))
        wait_for(lambda: sum(len(m.records) for m in members) >= len(truth), message="all read")
        assert [(m.revoked, m.lost) for m in members] == [([], [])] * 2
        for m in members:   # exactly its own partitions' records, each once
            assert sorted(m.records) == sorted((p, o, v) for (p, o), v in truth.items() if owner[p] is m)
        assert wait_stable(broker, "inventory", 2, 4) == before
    finally:
        for m in members:
            m.close()


def test_describe_and_list_show_a_consumer_group(broker, tmp_path):
    create_topic(broker.bootstrap, "orders", 4)
    members = [member(broker, tmp_path, f"m{i}") for i in range(2)]
    owned = wait_stable(broker, "inventory", 2, 4)
    group = describe(broker.bootstrap, "inventory")
    assert group.type is ConsumerGroupType.CONSUMER and group.partition_assignor == "uniform"
    assert {m.member_id: {tp.partition for tp in m.assignment.topic_partitions} for m in group.members} == owned
    for m in group.members:
        assert {tp.partition for tp in m.target_assignment.topic_partitions} == owned[m.member_id]
        assert {tp.topic for tp in m.assignment.topic_partitions} == {"orders"}
    client = admin(broker.bootstrap)   # kept alive until the future is done
    listed = client.list_consumer_groups().result(30).valid
    (listing,) = [g for g in listed if g.group_id == "inventory"]
    assert listing.type is ConsumerGroupType.CONSUMER
    for m in members:
        m.stop()


def test_static_member_returns_to_its_partitions(broker):
    """librdkafka leaves with MemberEpoch -2 when a static member closes; the same
    group.instance.id, under a new member id, gets the same partitions back."""
    create_topic(broker.bootstrap, "orders", 4)
    consumers = []

    def consumer(**config):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "g", "group.protocol": "consumer", **config})
        c.subscribe(["orders"])
        consumers.append(c)
        return c

    def assigned(c) -> set[int]:
        for other in consumers:
            other.poll(0.05)
        return {tp.partition for tp in c.assignment()}

    other, static = consumer(), consumer(**{"group.instance.id": "box-1"})
    wait_for(lambda: len(assigned(static)) == len(assigned(other)) == 2, message="two partitions each")
    before = assigned(static)
    static.close()
    consumers.remove(static)
    again = consumer(**{"group.instance.id": "box-1"})
    wait_for(lambda: assigned(again) == before, message="the same partitions back")
    assert assigned(other) == set(range(4)) - before
    for c in consumers:
        c.close()


def _join(wire, group="g", member_id=None, topics=("orders",)):
    member_id = member_id or uuid.uuid4().hex
    return member_id, wire.request(ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=60000, subscribed_topic_names=list(topics), subscribed_topic_regex=None,
        server_assignor=None, topic_partitions=[]), version=1)


def _commit(wire, member_id, epoch, group="g"):
    Topic = OffsetCommitRequest.OffsetCommitRequestTopic
    request = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=epoch, member_id=member_id,
                                  group_instance_id=None, retention_time_ms=-1, topics=[Topic(
                                      name="orders", partitions=[Topic.OffsetCommitRequestPartition(
                                          partition_index=0, committed_offset=5, committed_leader_epoch=-1,
                                          committed_metadata="")])])
    return wire.request(request, version=9).topics[0].partitions[0].error_code   # v9: KIP-848's own


def _fetch(wire, *members, group="g"):
    """OffsetFetch v9 for (member id, epoch) pairs, one group entry each: (error code, partition 0's offset)."""
    Group = OffsetFetchRequest.OffsetFetchRequestGroup
    response = wire.request(OffsetFetchRequest(require_stable=False, groups=[Group(
        group_id=group, member_id=member_id, member_epoch=epoch, topics=[Group.OffsetFetchRequestTopics(
            name="orders", partition_indexes=[0])]) for member_id, epoch in members]), version=9)
    return [(g.error_code, g.topics[0].partitions[0].committed_offset if g.topics else None) for g in response.groups]


def test_commits_are_checked_against_the_member_epoch(broker):
    create_topic(broker.bootstrap, "orders", 2)
    wire = Wire(broker.bootstrap)
    member_id, joined = _join(wire)
    assert joined.error_code == 0 and joined.member_epoch == 1
    assert _commit(wire, member_id, joined.member_epoch + 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert _commit(wire, "someone-else", joined.member_epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert _commit(wire, member_id, joined.member_epoch) == ErrorCode.NONE
    assert committed(broker.bootstrap, "g", "orders", [0]) == {0: 5}
    # OffsetFetch v9 checks a member as OffsetCommit does; an admin (no member id) is not one
    assert _fetch(wire, (member_id, joined.member_epoch), (member_id, joined.member_epoch + 1),
                  ("someone-else", joined.member_epoch), (None, -1)) == [
        (0, 5), (ErrorCode.STALE_MEMBER_EPOCH, None), (ErrorCode.UNKNOWN_MEMBER_ID, None), (0, 5)]
    assert _delete_offset(wire) == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC    # the live group reads the topic
    wire.request(ConsumerGroupHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=-1), version=1)
    assert _commit(wire, "", -1) == ErrorCode.NONE                      # no members: anyone may commit
    assert _delete_offset(wire) == ErrorCode.NONE
    assert committed(broker.bootstrap, "g", "orders", [0]) == {0: -1001}


def _delete_offset(wire, group="g"):
    Topic = OffsetDeleteRequest.OffsetDeleteRequestTopic
    response = wire.request(OffsetDeleteRequest(group_id=group, topics=[Topic(
        name="orders", partitions=[Topic.OffsetDeleteRequestPartition(partition_index=0)])]), version=0)
    return response.error_code or response.topics[0].partitions[0].error_code


def test_bad_heartbeats_get_errors_and_the_broker_keeps_serving(broker, tmp_path):
    create_topic(broker.bootstrap, "orders", 2)
    wire = Wire(broker.bootstrap)
    _, answer = _join(wire, member_id="m", topics=())
    answer = wire.request(ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=0, rebalance_timeout_ms=60000, subscribed_topic_names=["orders"],
        subscribed_topic_regex="orders(", server_assignor="sticky", topic_partitions=[]), version=1)
    assert answer.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR and "uniform" in answer.error_message
    answer = wire.request(ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=60000, subscribed_topic_names=["orders"],
        topic_partitions=[]), version=1)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    answer = wire.request(ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="m", member_epoch=7, topic_partitions=None), version=1)
    assert answer.error_code == ErrorCode.FENCED_MEMBER_EPOCH
    # v0: the broker makes the member id
    answer = wire.request(ConsumerGroupHeartbeatRequest(
        group_id="g", member_id="", member_epoch=0, rebalance_timeout_ms=60000, subscribed_topic_names=["orders"],
        topic_partitions=[]), version=0)
    assert answer.error_code == 0 and answer.member_id and answer.assignment is not None


def test_one_group_id_is_one_kind_of_group(broker):
    """A classic member cannot join a live consumer group, nor a consumer-protocol member a live
    classic group; an empty consumer group gives its id up to a classic join."""
    create_topic(broker.bootstrap, "orders", 2)
    wire = Wire(broker.bootstrap)
    member_id, joined = _join(wire)
    assert ClassicMember(broker).join_accepted().error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    wire.request(ConsumerGroupHeartbeatRequest(group_id="g", member_id=member_id, member_epoch=-1), version=1)
    classic = ClassicMember(broker)
    assert classic.join_accepted().error_code == ErrorCode.NONE
    assert _join(wire)[1].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    client = admin(broker.bootstrap)
    (listing,) = [g for g in client.list_consumer_groups().result(30).valid if g.group_id == "g"]
    assert listing.type is ConsumerGroupType.CLASSIC
