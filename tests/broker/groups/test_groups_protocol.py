"""The group protocol at the frame level: error codes for bad joins, syncs and commits, static
membership, protocol choice and session expiry, each leaving the group consistent."""
import struct
import threading
import time

import pytest
from kafka.protocol.admin import DeleteGroupsRequest, DescribeGroupsRequest
from kafka.protocol.metadata import MetadataRequest
from kafka.protocol.consumer import (HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, OffsetCommitRequest,
                                     OffsetFetchRequest, SyncGroupRequest)

from tests.support.wire import Wire

NONE, UNKNOWN_TOPIC_OR_PARTITION, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL = 0, 3, 22, 23
UNKNOWN_MEMBER_ID, INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, INVALID_REQUEST = 25, 26, 27, 42
NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND, MEMBER_ID_REQUIRED, FENCED_INSTANCE_ID = 68, 69, 79, 82


def subscription(*topics: str) -> bytes:
    """ConsumerProtocolSubscription v0."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    return (struct.pack(">hih", 0, 1, len(topic)) + topic.encode() + struct.pack(">i", len(partitions))
            + b"".join(struct.pack(">i", p) for p in partitions) + struct.pack(">i", -1))


class Client:
    """One member's connection to the coordinator."""

    def __init__(self, broker, group="g"):
        self.wire, self.group = Wire(broker.bootstrap), group
        self.member_id, self.generation, self.instance_id = "", -1, None

    def join(self, protocols=(("range", subscription("t")),), version=5, session_ms=6000, instance_id=None,
             protocol_type="consumer", rebalance_ms=10000):
        P = JoinGroupRequest.JoinGroupRequestProtocol
        self.instance_id = instance_id
        response = self.wire.request(JoinGroupRequest(
            group_id=self.group, session_timeout_ms=session_ms, rebalance_timeout_ms=rebalance_ms,
            member_id=self.member_id,
            group_instance_id=instance_id, protocol_type=protocol_type,
            protocols=[P(name=n, metadata=m) for n, m in protocols]), version)
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == NONE:
            self.generation = response.generation_id
        return response

    def join_accepted(self, **kw):
        """A v4+ join: the first answer hands out the member id, the second joins with it."""
        response = self.join(**kw)
        if response.error_code == MEMBER_ID_REQUIRED:
            response = self.join(**kw)
        return response

    def sync(self, assignments=(), generation=None):
        A = SyncGroupRequest.SyncGroupRequestAssignment
        return self.wire.request(SyncGroupRequest(
            group_id=self.group, generation_id=self.generation if generation is None else generation,
            member_id=self.member_id, group_instance_id=self.instance_id,
            assignments=[A(member_id=m, assignment=a) for m, a in assignments]), 3)

    def heartbeat(self, member_id=None):
        return self.wire.request(HeartbeatRequest(
            group_id=self.group, generation_id=self.generation, member_id=member_id or self.member_id,
            group_instance_id=self.instance_id), 3).error_code

    def commit(self, offset, generation=None, member_id=None, topic="t"):
        T = OffsetCommitRequest.OffsetCommitRequestTopic
        response = self.wire.request(OffsetCommitRequest(
            group_id=self.group, generation_id_or_member_epoch=self.generation if generation is None else generation,
            member_id=self.member_id if member_id is None else member_id, group_instance_id=None,
            topics=[T(name=topic, partitions=[T.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                committed_metadata="m")])]), 7)
        return response.topics[0].partitions[0].error_code

    def committed(self, topic="t"):
        T = OffsetFetchRequest.OffsetFetchRequestTopic
        response = self.wire.request(OffsetFetchRequest(group_id=self.group, topics=[T(name=topic,
                                                                                       partition_indexes=[0])]), 5)
        return response.topics[0].partitions[0].committed_offset

    def describe(self):
        return self.wire.request(DescribeGroupsRequest(groups=[self.group], include_authorized_operations=False),
                                 4).groups[0]


def in_thread(func, *args, **kwargs):
    """Run a blocking request (a JoinGroup parks until the rebalance completes) beside the test."""
    result = {}
    thread = threading.Thread(target=lambda: result.setdefault("value", func(*args, **kwargs)))
    thread.start()
    return lambda: (thread.join(30), result["value"])[1]


@pytest.fixture
def topic(broker):
    """Topic t (auto-created by a Metadata request), so commits to it are accepted."""
    Wire(broker.bootstrap).request(MetadataRequest[1](topics=[MetadataRequest.MetadataRequestTopic(name="t")]), 1)
    return "t"


def until_rebalance(client, attempts=100):
    """Heartbeat until the coordinator says to rejoin (another member's join is on its way)."""
    for _ in range(attempts):
        if client.heartbeat() == REBALANCE_IN_PROGRESS:
            return
        time.sleep(0.05)
    raise AssertionError("no rebalance started")


def stable_group(broker, members=1, **join):
    """A group of `members` members, all joined and synced in one generation; the first is the leader."""
    clients = [Client(broker) for _ in range(members)]
    first = clients[0]
    assert first.join_accepted(**join).error_code == NONE
    assert first.sync([(first.member_id, assignment("t", [0, 1, 2]))]).error_code == NONE
    if members > 1:
        joins = [in_thread(c.join_accepted, **join) for c in clients[1:]]
        until_rebalance(first)
        leader = first.join(**join)
        for c, j in zip(clients[1:], joins):
            assert j().error_code == NONE
        assert len(leader.members) == members
        syncs = [in_thread(c.sync) for c in clients[1:]]
        plan = [(c.member_id, assignment("t", [i])) for i, c in enumerate(clients)]
        assert first.sync(plan).error_code == NONE
        assert [s().assignment for s in syncs] == [a for _, a in plan[1:]]
    return clients


def test_first_join_v4_requires_member_id_and_v3_does_not(broker, topic):
    c = Client(broker)
    response = c.join(version=4)
    assert response.error_code == MEMBER_ID_REQUIRED and response.member_id
    assert c.join(version=4).error_code == NONE
    old = Client(broker, group="g-old")
    response = old.join(version=3)
    assert response.error_code == NONE and response.leader == response.member_id != ""


def test_leader_gets_every_subscription_and_common_protocol_is_chosen(broker, topic):
    a, b = Client(broker), Client(broker)
    assert a.join_accepted(protocols=[("range", b"A-range"), ("roundrobin", b"A-rr")]).protocol_name == "range"
    a.sync([(a.member_id, b"")])
    joining = in_thread(b.join_accepted, protocols=[("roundrobin", b"B-rr"), ("sticky", b"B-st")])
    until_rebalance(a)  # the rejoin signal
    leader = a.join(protocols=[("range", b"A-range"), ("roundrobin", b"A-rr")])
    follower = joining()
    assert leader.generation_id == follower.generation_id == 2
    assert leader.protocol_name == follower.protocol_name == "roundrobin"  # the one both support
    assert {(m.member_id, bytes(m.metadata)) for m in leader.members} == {(a.member_id, b"A-rr"),
                                                                           (b.member_id, b"B-rr")}
    assert follower.members == [] and follower.leader == a.member_id


def test_join_with_unsupported_protocol_is_refused_and_group_unchanged(broker, topic):
    (member,) = stable_group(broker)
    stranger = Client(broker)
    assert stranger.join(protocols=[("my-own-assignor", b"")]).error_code == INCONSISTENT_GROUP_PROTOCOL
    assert stranger.join(protocols=[("range", b"")], protocol_type="connect").error_code == INCONSISTENT_GROUP_PROTOCOL
    assert Client(broker, "fresh").join(protocols=[]).error_code == INCONSISTENT_GROUP_PROTOCOL
    assert Client(broker, "fresh").join(session_ms=10).error_code == INVALID_SESSION_TIMEOUT
    assert member.heartbeat() == NONE
    described = member.describe()
    assert (described.group_state, len(described.members)) == ("Stable", 1)


def test_commits_from_unknown_member_or_stale_generation_are_refused(broker, topic):
    a, b = stable_group(broker, 2)
    assert a.commit(5) == NONE
    assert a.commit(9, member_id="intruder") == UNKNOWN_MEMBER_ID
    assert a.commit(9, generation=a.generation - 1) == ILLEGAL_GENERATION
    assert a.commit(9, generation=-1, member_id="") == UNKNOWN_MEMBER_ID  # not a simple consumer: it has members
    assert a.commit(9, topic="no-such-topic") == UNKNOWN_TOPIC_OR_PARTITION
    assert b.heartbeat(member_id="intruder") == UNKNOWN_MEMBER_ID
    assert a.committed() == 5
    simple = Client(broker, "simple")  # no group membership: generation -1, no member id
    assert simple.commit(42, generation=-1, member_id="") == NONE
    assert simple.committed() == 42


def test_malformed_assignment_is_refused_and_the_group_rebalances(broker, topic):
    a, b = stable_group(broker, 2)
    # The leader's rejoin starts a rebalance, which b then joins. (Were b's join first, the coordinator
    # would answer it with the stable generation, as Kafka's does, and drop b when it did not rejoin.)
    rejoin = in_thread(a.join)
    until_rebalance(b)
    assert b.join().error_code == NONE and rejoin().error_code == NONE
    waiting = in_thread(b.sync)
    assert a.sync([(a.member_id, b"\x00\x00\xff\xff\xff")]).error_code == INVALID_REQUEST
    follower = waiting()  # parked before the leader's sync, or arriving after: no assignment either way
    assert (follower.error_code, follower.assignment) in ((INVALID_REQUEST, b""), (REBALANCE_IN_PROGRESS, b""))
    assert a.sync([(a.member_id, b""), ("not-a-member", b"")]).error_code == REBALANCE_IN_PROGRESS
    assert a.heartbeat() == REBALANCE_IN_PROGRESS  # everyone rejoins; a good assignment then settles it
    joins = [in_thread(c.join) for c in (a, b)]
    [j() for j in joins]
    waiting = in_thread(b.sync)
    assert a.sync([(a.member_id, assignment("t", [0])), (b.member_id, assignment("t", [1]))]).error_code == NONE
    assert waiting().assignment == assignment("t", [1])
    assert a.describe().group_state == "Stable"


def test_static_member_rejoins_without_rebalance_and_fences_its_old_id(broker, topic):
    a = Client(broker)
    assert a.join(instance_id="inventory-1").error_code == NONE  # static members skip MEMBER_ID_REQUIRED
    assert a.sync([(a.member_id, assignment("t", [0, 1]))]).error_code == NONE
    old_id, generation = a.member_id, a.generation
    restarted = Client(broker)
    response = restarted.join(instance_id="inventory-1")
    assert response.error_code == NONE and response.generation_id == generation and response.member_id != old_id
    assert restarted.sync().assignment == assignment("t", [0, 1])  # its assignment is kept
    assert a.heartbeat() == FENCED_INSTANCE_ID
    L = LeaveGroupRequest.MemberIdentity
    response = restarted.wire.request(LeaveGroupRequest(group_id="g", members=[
        L(member_id="", group_instance_id="inventory-1"), L(member_id="ghost", group_instance_id=None)]), 3)
    assert [m.error_code for m in response.members] == [NONE, UNKNOWN_MEMBER_ID]
    assert restarted.describe().group_state == "Empty"


def test_silent_member_expires_after_session_timeout(broker, topic):
    a, b = stable_group(broker, 2)
    rejoined = in_thread(a.join)  # b never heartbeats again
    response = rejoined()
    assert response.error_code == NONE and [m.member_id for m in response.members] == [a.member_id]
    assert b.heartbeat() == UNKNOWN_MEMBER_ID


def test_member_that_heartbeats_but_never_rejoins_is_dropped_at_the_rebalance_timeout(broker, topic):
    a, b = stable_group(broker, 2, rebalance_ms=2000)
    rejoined = in_thread(a.join, rebalance_ms=2000)
    until_rebalance(b)
    while b.heartbeat() == REBALANCE_IN_PROGRESS:  # alive, but ignoring the call to rejoin
        time.sleep(0.2)
    response = rejoined()
    assert response.error_code == NONE and [m.member_id for m in response.members] == [a.member_id]
    assert b.heartbeat() == UNKNOWN_MEMBER_ID


def test_delete_groups(broker, topic):
    (member,) = stable_group(broker)
    member.commit(3)
    wire = member.wire
    assert [r.error_code for r in wire.request(DeleteGroupsRequest(groups_names=["g", "nope"]), 1).results] == \
        [NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]
    L = LeaveGroupRequest.MemberIdentity
    wire.request(LeaveGroupRequest(group_id="g", members=[L(member_id=member.member_id, group_instance_id=None)]), 3)
    assert wire.request(DeleteGroupsRequest(groups_names=["g"]), 1).results[0].error_code == NONE
    assert member.committed() == -1
    assert member.describe().group_state == "Dead"
