"""The group coordinator's state machine, stepped in-process with a clock moved by hand.

No sockets: each test calls the coordinator as the JoinGroup, SyncGroup, Heartbeat,
LeaveGroup and OffsetCommit handlers do, and looks at the futures it answers with and at
the group as DescribeGroups reports it. The offsets log underneath is a real one (the
coordinator's store over the broker's append path and logs in a temporary directory; no
Broker). The wire tests in tests/broker/groups/test_groups*.py are the outer layer.
"""
import asyncio
import logging
import re
import threading
import types

import pytest
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from headwater.broker.groups.coordinator import JoinRequest, JoinResult
from headwater.broker.groups.group import TRANSITIONS, CommittedOffset, Group, GroupState, IllegalTransition
from headwater.broker.groups.store import OFFSETS_TOPIC
from headwater.log import Log, layout
from headwater.protocol.errors import ErrorCode
from headwater.records.layout import iter_batches

from tests.support.clock import ManualClock
from tests.support.parts import close_appender, open_appender, open_groups

E = ErrorCode
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                              GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)
SESSION_MS, REBALANCE_MS = 10_000, 30_000


def subscription(*topics: str) -> bytes:
    return ConsumerProtocolSubscription(version=0, topics=list(topics), user_data=None).encode(version=0)


def assignment(topic: str, *partitions: int) -> bytes:
    tp = ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=list(partitions))
    return ConsumerProtocolAssignment(version=0, assigned_partitions=[tp], user_data=None).encode(version=0)


RANGE = [("range", subscription("t"))]


@pytest.fixture
def coordinator(appender, clock):
    return open_groups(appender, clock)


def join(coordinator, member_id="", instance_id=None, protocols=RANGE, require_known_member_id=False,
         session_ms=SESSION_MS, group="g", rebalance_ms=REBALANCE_MS):
    return coordinator.join(JoinRequest(group, member_id, instance_id, "client", "/127.0.0.1", session_ms,
                                        rebalance_ms, "consumer", protocols, require_known_member_id))


def commit(coordinator, *request) -> ErrorCode:
    """OffsetCommit, as its handler awaits it."""
    return asyncio.run(coordinator.commit(*request))


def answer(future):
    """What a parked request has been answered; fails if it is still waiting."""
    assert future.done(), "the request is still parked"
    return future.result()


def stable_group(coordinator, instance_ids=(None, None)):
    """Members join one by one (each new one makes the others rejoin) and the leader assigns
    partition i to member i. Returns the members' last JoinResults, leader first."""
    joined: list[JoinResult] = []
    for instance_id in instance_ids:
        pending = [join(coordinator, instance_id=instance_id)]
        pending += [join(coordinator, r.member_id, r_instance) for r, r_instance in zip(joined, instance_ids)]
        joined = [answer(f) for f in pending[1:]] + [answer(pending[0])]
    generation = joined[0].generation
    assert [r.generation for r in joined] == [generation] * len(joined)
    assignments = [(r.member_id, assignment("t", i)) for i, r in enumerate(joined)]
    followers = [coordinator.sync("g", generation, r.member_id, i, []) for r, i in zip(joined[1:], instance_ids[1:])]
    assert not any(f.done() for f in followers)  # they wait for the leader
    leader = coordinator.sync("g", generation, joined[0].member_id, instance_ids[0], assignments)
    assert [answer(f) for f in [leader, *followers]] == [(E.NONE, a) for _, a in assignments]
    assert coordinator.describe("g").state is STABLE
    return joined


# --- join and sync -------------------------------------------------------------------------

def test_first_member_leads_generation_one_and_its_assignment_makes_the_group_stable(coordinator):
    assert coordinator.describe("g").state is DEAD  # unknown, as Kafka describes it
    result = answer(join(coordinator))
    assert (result.error, result.generation, result.protocol, result.leader) == (E.NONE, 1, "range", result.member_id)
    assert [(m.member_id, m.metadata("range")) for m in result.members] == [(result.member_id, subscription("t"))]
    described = coordinator.describe("g")
    assert (described.state, described.protocol, described.members[0].assignment) == (COMPLETING, "", b"")

    assert answer(coordinator.sync("g", 1, result.member_id, None, [(result.member_id, assignment("t", 0, 1))])) \
        == (E.NONE, assignment("t", 0, 1))
    described = coordinator.describe("g")
    assert (described.state, described.protocol_type, described.protocol) == (STABLE, "consumer", "range")
    assert [(m.member_id, m.metadata, m.assignment) for m in described.members] == [
        (result.member_id, subscription("t"), assignment("t", 0, 1))]
    assert [g.group_id for g in coordinator.list_groups()] == ["g"]


def test_join_v4_hands_out_a_member_id_first_and_forgets_it_after_a_session(coordinator, clock):
    first = answer(join(coordinator, require_known_member_id=True))
    assert first.error is E.MEMBER_ID_REQUIRED and first.member_id
    assert coordinator.describe("g").state is EMPTY  # an id handed out is not a member yet
    joined = answer(join(coordinator, first.member_id, require_known_member_id=True))
    assert (joined.error, joined.member_id, joined.generation) == (E.NONE, first.member_id, 1)

    forgotten = answer(join(coordinator, require_known_member_id=True, group="other"))
    clock.advance(SESSION_MS)
    assert answer(join(coordinator, forgotten.member_id, require_known_member_id=True, group="other")).error \
        is E.UNKNOWN_MEMBER_ID


def test_a_new_member_parks_until_the_others_rejoin_and_the_leader_sees_every_subscription(coordinator):
    a = answer(join(coordinator))
    b_join = join(coordinator, protocols=[("range", subscription("t", "u"))])
    assert not b_join.done()
    assert coordinator.describe("g").state is PREPARING
    assert coordinator.heartbeat("g", 1, a.member_id, None) is E.REBALANCE_IN_PROGRESS
    a2 = answer(join(coordinator, a.member_id))
    b = answer(b_join)
    assert (a2.generation, b.generation, a2.leader, b.leader) == (2, 2, a.member_id, a.member_id)
    assert {m.member_id: m.metadata("range") for m in a2.members} == {
        a.member_id: subscription("t"), b.member_id: subscription("t", "u")}
    assert b.members == []  # only the leader gets the subscriptions
    assert coordinator.describe("g").state is COMPLETING


def test_the_most_voted_common_protocol_is_chosen(coordinator):
    a = answer(join(coordinator, protocols=[("range", b"a"), ("roundrobin", b"a")]))
    b_join = join(coordinator, protocols=[("roundrobin", b"b"), ("range", b"b")])
    c_join = join(coordinator, protocols=[("sticky", b"c"), ("roundrobin", b"c"), ("range", b"c")])
    a2 = answer(join(coordinator, a.member_id, protocols=[("range", b"a"), ("roundrobin", b"a")]))
    assert [answer(f).protocol for f in (b_join, c_join)] == ["roundrobin", "roundrobin"]
    assert a2.protocol == "roundrobin"  # two votes against the leader's one
    assert answer(join(coordinator, protocols=[("sticky", b"d")])).error is E.INCONSISTENT_GROUP_PROTOCOL


def test_retried_join_in_completing_rebalance_gets_the_same_answer(coordinator):
    a, b = stable_group(coordinator)
    c_join = join(coordinator)
    a_join, b_join = join(coordinator, a.member_id), join(coordinator, b.member_id)
    a3, c = answer(a_join), answer(c_join)
    assert (a3.generation, c.generation, answer(b_join).generation) == (3, 3, 3)
    assert coordinator.describe("g").state is COMPLETING
    assert answer(join(coordinator, c.member_id)) == c
    assert answer(join(coordinator, a.member_id)) == a3


def test_an_unusable_assignment_fails_the_parked_syncs_and_restarts_the_rebalance(coordinator):
    a = answer(join(coordinator))
    b_join = join(coordinator)
    a = answer(join(coordinator, a.member_id))
    b = answer(b_join)
    follower = coordinator.sync("g", 2, b.member_id, None, [])
    leader = coordinator.sync("g", 2, a.member_id, None, [(a.member_id, b"\x00\x00\x00\x00\x00\x09")])
    assert answer(leader) == answer(follower) == (E.INVALID_REQUEST, b"")
    assert coordinator.describe("g").state is PREPARING
    assert coordinator.heartbeat("g", 2, b.member_id, None) is E.REBALANCE_IN_PROGRESS
    assert answer(coordinator.sync("g", 2, a.member_id, None, [])) == (E.REBALANCE_IN_PROGRESS, b"")


# --- heartbeat, session expiry, rebalance timeout -----------------------------------------

def test_heartbeats_keep_a_member_and_silence_expires_it_after_its_session(coordinator, clock):
    a, b = stable_group(coordinator)
    for _ in range(4):  # 4 x 0.6 sessions: both alive past one session
        clock.advance(SESSION_MS * 6 // 10)
        assert coordinator.heartbeat("g", 2, a.member_id, None) is E.NONE
        assert coordinator.heartbeat("g", 2, b.member_id, None) is E.NONE
    clock.advance(SESSION_MS - 1)  # b falls silent; a heartbeats just in time
    assert coordinator.heartbeat("g", 2, a.member_id, None) is E.NONE
    assert coordinator.describe("g").state is STABLE
    clock.advance(1)
    assert [m.member_id for m in coordinator.describe("g").members] == [a.member_id]
    assert coordinator.heartbeat("g", 2, a.member_id, None) is E.REBALANCE_IN_PROGRESS
    assert coordinator.heartbeat("g", 2, b.member_id, None) is E.UNKNOWN_MEMBER_ID
    a3 = answer(join(coordinator, a.member_id))
    assert (a3.generation, [m.member_id for m in a3.members]) == (3, [a.member_id])


def test_the_last_member_expiring_empties_the_group_and_keeps_its_offsets(coordinator, clock):
    (a,) = stable_group(coordinator, instance_ids=(None,))
    assert commit(coordinator, "g", 1, a.member_id, None, {("t", 0): CommittedOffset(42)}) is E.NONE
    clock.advance(SESSION_MS)
    described = coordinator.describe("g")
    assert (described.state, described.members) == (EMPTY, ())
    assert coordinator.committed("g")[("t", 0)].offset == 42


def test_a_parked_member_outlives_its_session_until_the_rebalance_timeout(coordinator, clock):
    a, b = stable_group(coordinator)
    a_join = join(coordinator, a.member_id, protocols=[("range", subscription("t", "u"))])  # changed subscription
    assert coordinator.describe("g").state is PREPARING
    for _ in range(REBALANCE_MS // 5000 - 1):  # b heartbeats but never rejoins
        clock.advance(5000)
        assert coordinator.heartbeat("g", 2, b.member_id, None) is E.REBALANCE_IN_PROGRESS
    clock.advance(4999)
    assert not a_join.done()  # parked past its own session: the rebalance timeout governs
    clock.advance(1)
    a3 = answer(a_join)
    assert (a3.generation, [m.member_id for m in a3.members]) == (3, [a.member_id])
    assert coordinator.heartbeat("g", 2, b.member_id, None) is E.UNKNOWN_MEMBER_ID


def test_nobody_rejoining_by_the_rebalance_timeout_empties_the_group(coordinator, clock):
    a, b = stable_group(coordinator)
    assert coordinator.leave("g", [(b.member_id, None)]) == [E.NONE]
    for _ in range(REBALANCE_MS // 5000):  # a heartbeats through the rebalance but never rejoins
        clock.advance(5000)
        coordinator.heartbeat("g", 2, a.member_id, None)
    assert coordinator.describe("g").state is EMPTY
    assert coordinator.heartbeat("g", 2, a.member_id, None) is E.UNKNOWN_MEMBER_ID


# --- static membership ---------------------------------------------------------------------

def test_static_member_rejoins_with_its_assignment_and_its_old_id_is_fenced(coordinator):
    a, b = stable_group(coordinator, instance_ids=("i-a", "i-b"))
    rejoined = answer(join(coordinator, instance_id="i-b"))  # b restarted: no member id, same instance id
    assert rejoined.error is E.NONE and rejoined.member_id != b.member_id
    assert (rejoined.generation, rejoined.leader, rejoined.members) == (2, a.member_id, [])
    assert coordinator.describe("g").state is STABLE  # no rebalance
    assert answer(coordinator.sync("g", 2, rejoined.member_id, "i-b", [])) == (E.NONE, assignment("t", 1))
    assert coordinator.heartbeat("g", 2, a.member_id, "i-a") is E.NONE

    assert coordinator.heartbeat("g", 2, b.member_id, "i-b") is E.FENCED_INSTANCE_ID
    assert answer(coordinator.sync("g", 2, b.member_id, "i-b", [])) == (E.FENCED_INSTANCE_ID, b"")
    assert commit(coordinator, "g", 2, b.member_id, "i-b", {("t", 1): CommittedOffset(5)}) is E.FENCED_INSTANCE_ID
    assert answer(join(coordinator, b.member_id, "i-b")).error is E.FENCED_INSTANCE_ID
    assert coordinator.leave("g", [(b.member_id, "i-b")]) == [E.FENCED_INSTANCE_ID]
    assert coordinator.committed("g") == {}


def test_static_member_rejoining_with_a_new_subscription_rebalances(coordinator):
    a, b = stable_group(coordinator, instance_ids=("i-a", "i-b"))
    b_join = join(coordinator, instance_id="i-b", protocols=[("range", subscription("t", "u"))])
    assert not b_join.done()
    assert coordinator.describe("g").state is PREPARING
    a3 = answer(join(coordinator, a.member_id, "i-a"))
    b3 = answer(b_join)
    assert (a3.generation, b3.generation) == (3, 3)
    assert {m.member_id: m.instance_id for m in a3.members} == {a.member_id: "i-a", b3.member_id: "i-b"}


# --- stale generation, unknown members, commits --------------------------------------------

def test_stale_generation_and_unknown_member_are_refused_by_heartbeat_sync_and_commit(coordinator):
    a, b = stable_group(coordinator)  # generation 2
    offsets = {("t", 0): CommittedOffset(7)}
    assert coordinator.heartbeat("g", 1, a.member_id, None) is E.ILLEGAL_GENERATION
    assert answer(coordinator.sync("g", 1, a.member_id, None, [])) == (E.ILLEGAL_GENERATION, b"")
    assert commit(coordinator, "g", 1, a.member_id, None, offsets) is E.ILLEGAL_GENERATION
    assert coordinator.heartbeat("g", 2, "stranger", None) is E.UNKNOWN_MEMBER_ID
    assert answer(coordinator.sync("g", 2, "stranger", None, [])) == (E.UNKNOWN_MEMBER_ID, b"")
    assert commit(coordinator, "g", 2, "stranger", None, offsets) is E.UNKNOWN_MEMBER_ID
    assert commit(coordinator, "g", -1, "", None, offsets) is E.UNKNOWN_MEMBER_ID  # simple commits need an empty group
    assert coordinator.committed("g") == {}
    assert coordinator.heartbeat("nope", 1, a.member_id, None) is E.UNKNOWN_MEMBER_ID
    assert commit(coordinator, "nope", 1, a.member_id, None, offsets) is E.ILLEGAL_GENERATION
    assert commit(coordinator, "g", 2, a.member_id, None, offsets) is E.NONE


def test_commit_in_completing_rebalance_asks_the_member_to_finish_its_rebalance(coordinator):
    a = answer(join(coordinator))
    assert coordinator.describe("g").state is COMPLETING
    assert commit(coordinator, "g", 1, a.member_id, None, {("t", 0): CommittedOffset(1)}) is E.REBALANCE_IN_PROGRESS
    assert commit(coordinator, "g", 0, a.member_id, None, {("t", 0): CommittedOffset(1)}) is E.ILLEGAL_GENERATION
    assert coordinator.committed("g") == {}


def test_commits_are_stamped_with_the_clock_and_a_simple_consumer_commits_to_an_empty_group(coordinator, clock):
    clock.advance(1234)
    offsets = {("t", 0): CommittedOffset(10, 3, "meta"), ("t", 1): CommittedOffset(20)}
    assert commit(coordinator, "solo", -1, "", None, offsets) is E.NONE
    committed = coordinator.committed("solo")
    assert {tp: (c.offset, c.leader_epoch, c.metadata, c.commit_timestamp) for tp, c in committed.items()} == {
        ("t", 0): (10, 3, "meta", clock.now_ms()), ("t", 1): (20, -1, "", clock.now_ms())}
    assert coordinator.describe("solo").state is EMPTY
    assert commit(coordinator, "", -1, "", None, offsets) is E.INVALID_GROUP_ID


def test_a_commit_counts_as_a_heartbeat(coordinator, clock):
    (a,) = stable_group(coordinator, instance_ids=(None,))
    for offset in range(3):
        clock.advance(SESSION_MS - 1)
        assert commit(coordinator, "g", 1, a.member_id, None, {("t", 0): CommittedOffset(offset)}) is E.NONE
    assert coordinator.describe("g").state is STABLE


# --- leave, delete, restart ----------------------------------------------------------------

def test_leave_rebalances_the_rest_and_the_last_leaver_empties_the_group(coordinator):
    a, b = stable_group(coordinator)
    assert coordinator.leave("g", [(a.member_id, None), ("stranger", None)]) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    assert coordinator.describe("g").state is PREPARING
    b3 = answer(join(coordinator, b.member_id))
    assert (b3.generation, b3.leader) == (3, b.member_id)  # the leader left: b leads
    assert coordinator.leave("g", [(b.member_id, None)]) == [E.NONE]
    described = coordinator.describe("g")
    assert (described.state, described.members) == (EMPTY, ())
    assert coordinator.leave("g", [(b.member_id, None)]) == [E.UNKNOWN_MEMBER_ID]


def test_a_static_member_leaves_by_its_instance_id(coordinator):
    a, b = stable_group(coordinator, instance_ids=("i-a", "i-b"))
    assert coordinator.leave("g", [("", "i-b"), ("", "i-unknown")]) == [E.NONE, E.UNKNOWN_MEMBER_ID]
    a3 = answer(join(coordinator, a.member_id, "i-a"))
    assert [(m.member_id, m.instance_id) for m in a3.members] == [(a.member_id, "i-a")]
    assert not join(coordinator, instance_id="i-b").done()  # a newcomer now: the group rebalances for it
    assert coordinator.describe("g").state is PREPARING


def test_delete_needs_an_empty_group_and_leaves_it_dead(coordinator):
    (a,) = stable_group(coordinator, instance_ids=(None,))
    assert commit(coordinator, "g", 1, a.member_id, None, {("t", 0): CommittedOffset(3)}) is E.NONE
    assert coordinator.delete("g") is E.NON_EMPTY_GROUP
    assert coordinator.leave("g", [(a.member_id, None)]) == [E.NONE]
    assert coordinator.delete("g") is E.NONE
    assert coordinator.describe("g").state is DEAD
    assert (coordinator.committed("g"), coordinator.list_groups()) == ({}, [])
    assert coordinator.delete("g") is E.GROUP_ID_NOT_FOUND


def test_groups_and_offsets_come_back_after_a_restart_and_restored_members_get_one_session(tmp_path):
    before_clock, after_clock = ManualClock(), ManualClock()
    appender = open_appender(tmp_path / "data")
    groups = open_groups(appender, before_clock)
    a, b = stable_group(groups, instance_ids=("i-a", None))
    assert commit(groups, "g", 2, a.member_id, "i-a", {("t", 0): CommittedOffset(42, 1, "m")}) is E.NONE
    described = groups.describe("g")
    close_appender(appender)
    appender = open_appender(tmp_path / "data")
    restarted = open_groups(appender, after_clock)
    try:
        assert restarted.describe("g") == described
        committed = restarted.committed("g")[("t", 0)]
        assert (committed.offset, committed.leader_epoch, committed.metadata, committed.commit_timestamp) == (
            42, 1, "m", before_clock.now_ms())
        after_clock.advance(SESSION_MS - 1)
        assert restarted.heartbeat("g", 2, b.member_id, None) is E.NONE
        assert restarted.heartbeat("g", 2, "other", "i-a") is E.FENCED_INSTANCE_ID
        after_clock.advance(1)  # a never came back
        assert [m.member_id for m in restarted.describe("g").members] == [b.member_id]
        assert restarted.heartbeat("g", 2, b.member_id, None) is E.REBALANCE_IN_PROGRESS
    finally:
        close_appender(appender)
        before_clock.close()
        after_clock.close()


# --- group.initial.rebalance.delay.ms ---------------------------------------------------------

DELAY_MS = 3000


def kafka_first_generation_ms(later_joins_ms: tuple[int, ...], rebalance_ms: int) -> int:
    """Kafka's InitialDelayedJoin in plain Python: when the first generation of a group whose
    first member joined at 0 forms. Each delay that saw a new member is followed by another,
    cut to what is left of the rebalance timeout."""
    start, due, remaining = 0, DELAY_MS, max(rebalance_ms - DELAY_MS, 0)
    while remaining and any(start < t < due for t in later_joins_ms):
        step = min(DELAY_MS, remaining)
        start, due, remaining = due, due + step, remaining - step
    return due


@pytest.mark.parametrize("later_joins_ms, rebalance_ms", [
    ((), REBALANCE_MS),
    ((2500,), REBALANCE_MS),
    ((1500, 2500), REBALANCE_MS),            # two in one delay: one more delay
    ((2500, 5500), REBALANCE_MS),
    (tuple(range(2500, 40_000, 2500)), REBALANCE_MS),   # members keep coming: the rebalance timeout ends it
    ((2500,), 4000),                         # the second delay is cut to the timeout's last 1000 ms
])
def test_a_new_groups_first_rebalance_waits_for_members_that_keep_joining(appender, clock, later_joins_ms,
                                                                           rebalance_ms):
    coordinator = open_groups(appender, clock, DELAY_MS)
    expected_ms = kafka_first_generation_ms(later_joins_ms, rebalance_ms)
    pending = [join(coordinator, rebalance_ms=rebalance_ms)]
    elapsed = 0
    while not pending[0].done():
        clock.advance(500)
        elapsed += 500
        if elapsed in later_joins_ms and not pending[0].done():
            pending.append(join(coordinator, rebalance_ms=rebalance_ms))
    assert elapsed == expected_ms
    joined = [answer(f) for f in pending]
    assert {r.generation for r in joined} == {1}
    assert len(joined) == 1 + sum(t < expected_ms for t in later_joins_ms)
    assert coordinator.describe("g").state is COMPLETING


def test_only_an_empty_groups_rebalance_is_delayed(appender, clock):
    coordinator = open_groups(appender, clock, DELAY_MS)
    first = join(coordinator, require_known_member_id=True)
    assert answer(first).error is E.MEMBER_ID_REQUIRED   # handing out an id starts no rebalance
    a = join(coordinator, answer(first).member_id)
    clock.advance(DELAY_MS - 1)
    assert not a.done()  # all (one) joined, yet it waits the delay
    clock.advance(1)
    leader = answer(a)
    assert answer(coordinator.sync("g", 1, leader.member_id, None, [])) == (E.NONE, b"")
    b, a_again = join(coordinator), join(coordinator, leader.member_id)
    assert [answer(f).generation for f in (b, a_again)] == [2, 2]  # a live group rebalances at once
    assert coordinator.leave("g", [(answer(a_again).member_id, None), (answer(b).member_id, None)]) == [E.NONE] * 2
    assert coordinator.describe("g").state is EMPTY
    again = join(coordinator)
    assert not again.done()  # empty again: the next first rebalance waits too
    clock.advance(DELAY_MS)
    assert answer(again).generation == 4


# --- the state diagram -----------------------------------------------------------------------

def test_the_transition_table_is_the_diagram_drawn_in_the_docstring():
    drawn = set(re.findall(r"(\w+) --[^\n]*?--> (\w+)", Group.transition.__doc__))
    assert drawn == {(source.value, target.value) for source, targets in TRANSITIONS.items() for target in targets}


@pytest.mark.parametrize("source, target", [(EMPTY, STABLE), (EMPTY, COMPLETING), (PREPARING, STABLE),
                                            (PREPARING, DEAD), (COMPLETING, EMPTY), (STABLE, COMPLETING),
                                            (STABLE, EMPTY), (STABLE, STABLE), (DEAD, EMPTY), (DEAD, PREPARING)])
def test_a_move_off_the_diagram_raises_and_leaves_the_state_alone(source, target):
    group = Group("g", state=source)
    with pytest.raises(IllegalTransition, match=f"from {source.value} to {target.value}"):
        group.transition(target)
    assert group.state is source


def test_every_edge_of_the_diagram_is_taken():
    for source, targets in TRANSITIONS.items():
        for target in targets:
            group = Group("g", state=source)
            group.transition(target)
            assert group.state is target


def test_client_supplied_ids_are_logged_escaped(coordinator, caplog):
    """Group and instance ids come from clients: a newline in one must not start a forged log line."""
    forged = "g\n2026-01-01 12:00:00 INFO headwater.broker: ('10.0.0.1', 1) authenticated 'User:admin'"
    with caplog.at_level(logging.INFO):
        result = answer(join(coordinator, instance_id=forged, group=forged))
        coordinator.leave(forged, [(result.member_id, forged)])
    messages = [r.getMessage() for r in caplog.records]
    assert any(repr(forged) in m for m in messages), messages
    assert not any("\n" in m for m in messages), messages


def test_a_commit_larger_than_one_batch_of_the_offsets_topic_is_stored_whole_and_comes_back(tmp_path):
    # Kafka's binary offset records put ~10,000 partitions in one 1 MB batch; ours are JSON, ~150 bytes
    # each, so a commit of thousands of partitions is written as several batches of the topic's size
    clock = ManualClock()
    offsets = {("wide", p): CommittedOffset(p * 7, -1, "m" * (p % 50)) for p in range(20_000)}
    appender = open_appender(tmp_path / "data")
    try:
        assert commit(open_groups(appender, clock), "g", -1, "", None, offsets) is E.NONE
        limit = appender.log_manager.get_log(OFFSETS_TOPIC, 0).config.max_message_bytes
    finally:
        close_appender(appender)
    directory = layout.partition_dir(tmp_path / "data", OFFSETS_TOPIC, 0)
    stored = b"".join(layout.segment_file(directory, base, layout.LOG).read_bytes()
                      for base in layout.segment_base_offsets(directory))
    sizes = [header.size for _, header in iter_batches(stored)]
    assert len(sizes) > 1 and max(sizes) <= limit
    appender = open_appender(tmp_path / "data")
    try:
        committed = open_groups(appender, clock).committed("g")
        assert {tp: (c.offset, c.metadata) for tp, c in committed.items()} == {
            tp: (c.offset, c.metadata) for tp, c in offsets.items()}
    finally:
        close_appender(appender)
        clock.close()


# --- under --flush always: a commit fsynced in the broker's group commit, off the event loop ----

@pytest.fixture
def held_fsync(tmp_path, monkeypatch):
    """A coordinator over --flush always whose __consumer_offsets fsyncs can be held (``hold``,
    until ``release``) or made to fail (``broken``); ``threads`` are the held fsyncs' threads."""
    control = types.SimpleNamespace(hold=threading.Event(), in_fsync=threading.Event(), release=threading.Event(),
                                    broken=False, threads=[])
    real_flush = Log.flush

    def flush(plog):
        if plog.directory.name == f"{OFFSETS_TOPIC}-0":
            if control.hold.is_set() and threading.current_thread().name.startswith("fsync"):  # the group commit's
                control.threads.append(threading.get_ident())
                control.in_fsync.set()
                control.release.wait(10)
            if control.broken:
                raise OSError(5, "Input/output error")
        real_flush(plog)
    monkeypatch.setattr(Log, "flush", flush)
    appender, clock = open_appender(tmp_path / "data", flush="always"), ManualClock()
    control.coordinator, control.appender = open_groups(appender, clock), appender
    yield control
    control.release.set()
    close_appender(appender)
    clock.close()


def offset_of(coordinator, group="solo", tp=("t", 0)):
    committed = coordinator.committed(group).get(tp)
    return committed.offset if committed is not None else None


def test_a_commit_is_answered_after_its_fsync_off_the_loop_and_visible_only_then(held_fsync):
    coordinator, appender = held_fsync.coordinator, held_fsync.appender
    (a,) = stable_group(coordinator, instance_ids=(None,))

    async def commits():
        assert await coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(3)}) is E.NONE
        held_fsync.hold.set()
        pending = asyncio.ensure_future(coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(7)}))
        assert await asyncio.to_thread(held_fsync.in_fsync.wait, 10)
        # the loop goes on: another group's member heartbeats; the commit is pending, its offset not seen
        assert coordinator.heartbeat("g", 1, a.member_id, None) is E.NONE
        assert not pending.done() and offset_of(coordinator) == 3
        held_fsync.release.set()
        assert await pending is E.NONE and offset_of(coordinator) == 7
        log = appender.log_manager.get_log(OFFSETS_TOPIC, 0)
        assert log.recovery_point >= log.log_end_offset       # answered once durable
    asyncio.run(commits())
    assert held_fsync.threads and threading.get_ident() not in held_fsync.threads


def test_a_commit_whose_fsync_fails_is_answered_the_error_and_its_offsets_are_not_seen(held_fsync):
    coordinator = held_fsync.coordinator

    async def commits():
        assert await coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(3)}) is E.NONE
        held_fsync.broken = True
        answer_ = await coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(7)})
        assert answer_ is E.COORDINATOR_NOT_AVAILABLE and offset_of(coordinator) == 3
        held_fsync.broken = False
        assert await coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(8)}) is E.NONE
        assert offset_of(coordinator) == 8
    asyncio.run(commits())


def test_two_commits_in_flight_become_visible_in_the_order_they_were_appended(held_fsync):
    coordinator = held_fsync.coordinator

    async def commits():
        held_fsync.hold.set()
        first = asyncio.ensure_future(coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(5),
                                                                                ("t", 1): CommittedOffset(50)}))
        assert await asyncio.to_thread(held_fsync.in_fsync.wait, 10)
        second = asyncio.ensure_future(coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(9)}))
        await asyncio.sleep(0)   # appended, waiting for the round after the held one
        assert offset_of(coordinator) is None
        held_fsync.hold.clear()
        held_fsync.release.set()
        assert await asyncio.gather(first, second) == [E.NONE, E.NONE]
        assert (offset_of(coordinator), offset_of(coordinator, tp=("t", 1))) == (9, 50)
    asyncio.run(commits())


def test_an_offset_deleted_while_its_commit_is_pending_does_not_come_back(held_fsync):
    coordinator = held_fsync.coordinator

    async def commits():
        assert await coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(3)}) is E.NONE
        held_fsync.hold.set()
        pending = asyncio.ensure_future(coordinator.commit("solo", -1, "", None, {("t", 0): CommittedOffset(7)}))
        assert await asyncio.to_thread(held_fsync.in_fsync.wait, 10)
        assert coordinator.delete_offsets("solo", [("t", 0)]) == (E.NONE, {("t", 0): E.NONE})  # its tombstone follows
        held_fsync.release.set()
        assert await pending is E.NONE and offset_of(coordinator) is None
    asyncio.run(commits())
