"""The consumer group protocol's (KIP-848) state machine, stepped in-process with a clock moved
by hand: members heartbeat as ConsumerGroupHeartbeat does, and after every step no partition
is owned by two members. The wire tests (tests/broker/groups/test_consumer_groups.py) are the
outer layer."""
import asyncio
import logging
import random
import threading
from dataclasses import fields

import pytest

from headwater.broker.groups.consumer_group import ConsumerGroupError, GroupState, HeartbeatRequest, MemberState
from headwater.broker.groups.consumer_group_store import group_key, member_key
from headwater.broker.groups.store import OFFSETS_TOPIC, GroupStore
from headwater.log import Log
from headwater.protocol.errors import ErrorCode

from tests.support.clock import ManualClock
from tests.support.parts import close_appender, open_appender, open_consumer_groups

SESSION_MS, REBALANCE_MS = 45_000, 60_000


@pytest.fixture
def topics():
    return {"t": 6}


@pytest.fixture
def coordinator(appender, clock, topics):
    return open_consumer_groups(appender, clock, topics)


def joining(member_id, topics=("t",), group_id="g", **fields):
    return HeartbeatRequest(group_id, member_id, 0, rebalance_timeout_ms=REBALANCE_MS,
                            subscribed_topic_names=list(topics), **fields)


def join(coordinator, member_id, topics=("t",), **fields):
    return coordinator.heartbeat(joining(member_id, topics, **fields))


def beat(coordinator, member_id, epoch, owned=None, **fields):
    return coordinator.heartbeat(HeartbeatRequest("g", member_id, epoch, owned=owned, **fields))


def refused(code, call, *args, **kwargs):
    with pytest.raises(ConsumerGroupError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value
    return caught.value


def tps(*partitions, topic="t"):
    return frozenset((topic, p) for p in partitions)


def owned_by_one(group):
    """No partition owned (assigned or being revoked) by two members; the owners table agrees."""
    seen = {}
    for m in group.members.values():
        for tp in m.assigned | m.revoking:
            assert tp not in seen, f"{tp} owned by {seen[tp]} and {m.member_id}"
            seen[tp] = m.member_id
    assert seen == group.owners


class Client:
    """A well-behaved member: gives up what its assignment no longer holds at once, reports what it owns."""

    def __init__(self, coordinator, member_id, topics=("t",)):
        self.coordinator, self.member_id = coordinator, member_id
        result = join(coordinator, member_id, topics)
        self.epoch, self.owned = result.member_epoch, result.assignment or frozenset()

    def beat(self, **fields):
        result = beat(self.coordinator, self.member_id, self.epoch, owned=self.owned, **fields)
        self.epoch = result.member_epoch
        if result.assignment is not None:
            self.owned = result.assignment
        return result


def settle(group, clients, rounds=10):
    for _ in range(rounds):
        for c in clients:
            c.beat()
            owned_by_one(group)
        if group.state is GroupState.STABLE:
            return
    raise AssertionError(f"group did not settle: {group.state}")


def test_first_member_gets_every_partition(coordinator):
    result = join(coordinator, "m1")
    assert (result.member_id, result.member_epoch, result.heartbeat_interval_ms) == ("m1", 1, 5000)
    assert result.assignment == tps(*range(6))
    group = coordinator.groups["g"]
    assert (group.state, group.epoch, group.assignor) == (GroupState.STABLE, 1, "uniform")
    assert beat(coordinator, "m1", 1, owned=tps(*range(6))).assignment is None  # nothing new to say


def test_partitions_move_only_after_their_owner_revokes_them(coordinator):
    m1 = Client(coordinator, "m1")
    m2 = Client(coordinator, "m2")
    group = coordinator.groups["g"]
    assert (group.epoch, m2.epoch, m2.owned) == (2, 2, frozenset())   # all six still m1's
    assert group.members["m2"].state is MemberState.UNRELEASED_PARTITIONS
    to_move = group.target["m2"]
    assert len(to_move) == 3 and group.target["m1"] | to_move == tps(*range(6))
    result = m1.beat()                                 # m1 learns it must give three up; epoch kept
    assert (result.member_epoch, result.assignment) == (1, group.target["m1"])
    assert group.members["m1"].state is MemberState.UNREVOKED_PARTITIONS
    assert m2.beat().assignment is None                # not free yet
    owned_by_one(group)
    m1.beat()                                          # reports the smaller set: revoked
    assert (m1.epoch, group.members["m1"].state) == (2, MemberState.STABLE)
    assert m2.beat().assignment == to_move
    assert group.state is GroupState.STABLE
    owned_by_one(group)


def test_three_members_cover_every_partition_and_one_leaving_moves_only_its_own(coordinator):
    clients = [Client(coordinator, f"m{i}") for i in range(3)]
    group = coordinator.groups["g"]
    settle(group, clients)
    assert sorted(len(c.owned) for c in clients) == [2, 2, 2]
    assert frozenset().union(*(c.owned for c in clients)) == tps(*range(6))
    before = {c.member_id: c.owned for c in clients}
    leaver = clients.pop()
    result = beat(coordinator, leaver.member_id, -1)
    assert result.member_epoch == -1 and leaver.member_id not in group.members
    settle(group, clients)
    assert frozenset().union(*(c.owned for c in clients)) == tps(*range(6))
    assert all(before[c.member_id] <= c.owned for c in clients)


def test_session_timeout_fences_a_silent_member(coordinator, clock):
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    group = coordinator.groups["g"]
    settle(group, [a, b])
    for _ in range(10):                                # a keeps heartbeating, b falls silent
        clock.advance(5_000)
        a.beat()
    assert "b" not in group.members and a.owned == tps(*range(6))
    refused(ErrorCode.UNKNOWN_MEMBER_ID, beat, coordinator, "b", b.epoch)
    assert join(coordinator, "b").member_epoch > b.epoch   # a fenced member rejoins with epoch 0


@pytest.mark.parametrize("restarted", [False, True])
def test_rebalance_timeout_fences_a_member_that_does_not_revoke(restart, restarted):
    """Also when the broker restarts while the member has partitions to revoke: the restored
    member's rebalance timeout starts again, as Kafka's coordinator does when it loads a group."""
    coordinator, clock, _ = restart()
    a = Client(coordinator, "a")
    b = Client(coordinator, "b")
    a_result = beat(coordinator, "a", a.epoch)         # told to revoke; never acknowledges
    if restarted:
        coordinator, clock, _ = restart()
        restarted_clients(coordinator, [b])
    assert coordinator.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    for _ in range(REBALANCE_MS // 5_000 - 1):
        clock.advance(5_000)
        beat(coordinator, "a", a_result.member_epoch)  # heartbeats without owned partitions
        b.beat()
    assert "a" in coordinator.groups["g"].members and b.owned == frozenset()
    clock.advance(5_000)
    assert "a" not in coordinator.groups["g"].members
    b.beat()
    assert b.owned == tps(*range(6))


def test_member_epoch_checks(coordinator):
    a = Client(coordinator, "a")
    refused(ErrorCode.FENCED_MEMBER_EPOCH, beat, coordinator, "a", a.epoch + 1)
    refused(ErrorCode.UNKNOWN_MEMBER_ID, beat, coordinator, "nobody", 1)
    b = Client(coordinator, "b")
    a.beat(); a.beat(); b.beat()
    assert a.epoch == 2
    # the previous epoch is accepted while what it claims to own is still its own (a lost response)
    assert beat(coordinator, "a", 1, owned=a.owned).member_epoch == 2
    refused(ErrorCode.FENCED_MEMBER_EPOCH, beat, coordinator, "a", 1, owned=tps(*range(6)))
    refused(ErrorCode.FENCED_MEMBER_EPOCH, beat, coordinator, "a", 3)


def test_static_member_leaves_and_returns_to_its_partitions(coordinator, clock):
    a = Client(coordinator, "a")
    join(coordinator, "s1", instance_id="box-1")
    group = coordinator.groups["g"]
    settle(group, [a, _Attached(coordinator, "s1")])
    kept = group.members["s1"].assigned
    epoch = group.epoch
    refused(ErrorCode.UNRELEASED_INSTANCE_ID, join, coordinator, "s2", instance_id="box-1")
    assert beat(coordinator, "s1", group.members["s1"].epoch, instance_id="box-1").member_epoch > 0
    assert beat(coordinator, "s1", -2, instance_id="box-1").member_epoch == -2
    result = join(coordinator, "s2", instance_id="box-1")   # the restarted process, a new member id
    assert result.assignment == kept and group.epoch == epoch and "s1" not in group.members
    owned_by_one(group)
    refused(ErrorCode.FENCED_INSTANCE_ID, beat, coordinator, "s1", 1, instance_id="box-1")


class _Attached(Client):
    """A client for a member that has already joined."""

    def __init__(self, coordinator, member_id):
        self.coordinator, self.member_id = coordinator, member_id
        member = coordinator.groups["g"].members[member_id]
        self.epoch, self.owned = member.epoch, member.assigned


def test_static_member_that_never_returns_is_fenced_after_the_session(coordinator, clock):
    a = Client(coordinator, "a")
    join(coordinator, "s1", instance_id="box-1")
    beat(coordinator, "s1", -2, instance_id="box-1")
    for _ in range(10):
        clock.advance(5_000)
        a.beat()
    assert "s1" not in coordinator.groups["g"].members and a.owned == tps(*range(6))


def test_bad_requests_get_clear_errors(appender, clock, topics):
    coordinator = open_consumer_groups(appender, clock, topics, max_size=3)
    refused(ErrorCode.INVALID_REQUEST, coordinator.heartbeat, HeartbeatRequest("", "m", 0))
    refused(ErrorCode.INVALID_REQUEST, coordinator.heartbeat,
            HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=REBALANCE_MS))   # no subscription
    refused(ErrorCode.INVALID_REQUEST, join, coordinator, "m", owned=tps(0))
    refused(ErrorCode.UNSUPPORTED_ASSIGNOR, join, coordinator, "m", server_assignor="sticky")
    error = refused(ErrorCode.INVALID_REGULAR_EXPRESSION, join, coordinator, "m", subscribed_topic_regex="t(")
    assert "t(" in str(error)
    refused(ErrorCode.GROUP_ID_NOT_FOUND, coordinator.heartbeat,
            HeartbeatRequest("classic", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=["t"]))
    for member_id in ("m", "n", "o"):
        join(coordinator, member_id)
    refused(ErrorCode.GROUP_MAX_SIZE_REACHED, join, coordinator, "p")
    assert list(coordinator.groups["g"].members) == ["m", "n", "o"]   # still serving


def test_regex_subscription_and_new_topics(coordinator, topics):
    topics["orders-eu"] = 2
    result = join(coordinator, "m", topics=(), subscribed_topic_regex="orders-.*")
    assert result.assignment == tps(0, 1, topic="orders-eu")
    topics["orders-us"] = 1                            # a topic appears that the regex matches
    result = beat(coordinator, "m", result.member_epoch)
    assert result.assignment == tps(0, 1, topic="orders-eu") | tps(0, topic="orders-us")
    topics["t"] = 8                                     # unsubscribed topics change nothing
    assert beat(coordinator, "m", result.member_epoch).assignment is None


def test_added_partitions_are_assigned(coordinator, topics):
    result = join(coordinator, "m")
    topics["t"] = 8
    result = beat(coordinator, "m", result.member_epoch)
    assert (result.member_epoch, result.assignment) == (2, tps(*range(8)))


def test_range_assignor_on_request(coordinator):
    a = Client(coordinator, "a")
    beat(coordinator, "a", a.epoch, server_assignor="range")
    b = Client(coordinator, "b")
    group = coordinator.groups["g"]
    settle(group, [a, b])
    assert group.assignor == "range"
    assert (a.owned, b.owned) == (tps(0, 1, 2), tps(3, 4, 5))


def test_commit_checks_the_member_epoch(coordinator):
    assert coordinator.check_commit("other", "m", 1) is None       # not a consumer group: classic rules
    a = Client(coordinator, "a")
    assert coordinator.check_commit("g", "a", a.epoch) == ErrorCode.NONE
    assert coordinator.check_commit("g", "a", a.epoch - 1) == ErrorCode.STALE_MEMBER_EPOCH
    assert coordinator.check_commit("g", "x", a.epoch) == ErrorCode.UNKNOWN_MEMBER_ID
    assert coordinator.check_commit("g", "", -1) == ErrorCode.UNKNOWN_MEMBER_ID   # members: no simple commits
    beat(coordinator, "a", -1)
    assert coordinator.check_commit("g", "", -1) == ErrorCode.NONE
    assert coordinator.delete("g") == ErrorCode.NONE and "g" not in coordinator.groups


def test_random_membership_changes_never_double_assign(coordinator, clock, topics):
    """Members join, leave, fall silent and change subscriptions in a random order; after each
    step no partition has two owners, and once everyone heartbeats the group is stable with
    every subscribed partition owned."""
    topics.update(u=5, v=3)
    rng = random.Random(848)
    clients: dict[str, Client] = {}
    for step in range(400):
        action = rng.random()
        if action < 0.15 or not clients:
            member_id = f"m{step}"
            clients[member_id] = Client(coordinator, member_id, rng.sample(["t", "u", "v"], rng.randint(1, 3)))
        elif action < 0.22:
            member_id = rng.choice(sorted(clients))
            del clients[member_id]
            beat(coordinator, member_id, -1)
        elif action < 0.27:
            clock.advance(rng.randint(0, 30_000))   # long enough, now and then, to fence the silent
        else:
            client = clients[rng.choice(sorted(clients))]
            resubscribe = rng.sample(["t", "u", "v"], rng.randint(1, 3)) if action > 0.9 else None
            try:
                client.beat(subscribed_topic_names=resubscribe)
            except ConsumerGroupError as exc:   # fenced meanwhile (rebalance or session timeout)
                assert exc.code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH)
                del clients[client.member_id]
        owned_by_one(coordinator.groups["g"])
        clients = {m: c for m, c in clients.items() if m in coordinator.groups["g"].members}
    group = coordinator.groups["g"]
    settle(group, list(clients.values()), rounds=20)
    subscribed = {t for c in clients.values() for t in group.members[c.member_id].subscribed_names}
    assert frozenset().union(*(c.owned for c in clients.values())) == \
        frozenset((t, p) for t in subscribed for p in range(topics[t]))


# --- durability: the groups replayed from __consumer_offsets after a restart ---------------------

@pytest.fixture
def restart(tmp_path, topics):
    """``restart()``: the broker stopping (its logs closed) and starting again on the same data
    directory: a new coordinator replaying __consumer_offsets, on a new clock (the old timers die
    with the old broker). Returns (coordinator, clock, appender)."""
    opened = []

    def restart_(flush="never", **options):
        while opened:
            appender, clock = opened.pop()
            close_appender(appender)
            clock.close()
        appender, clock = open_appender(tmp_path / "data", flush), ManualClock()
        opened.append((appender, clock))
        return open_consumer_groups(appender, clock, topics, **options), clock, appender
    yield restart_
    for appender, clock in opened:
        close_appender(appender)
        clock.close()


def offsets_end(appender) -> int:
    return appender.log_manager.get_log(OFFSETS_TOPIC, 0).log_end_offset


def snapshot(coordinator) -> dict:
    """Everything a group holds but its timers, comparable."""
    def member(m):
        return {f.name: getattr(m, f.name) for f in fields(m) if not f.name.endswith("_timer")}
    return {g.group_id: ({f.name: getattr(g, f.name) for f in fields(g) if f.name != "members"},
                         {mid: member(m) for mid, m in g.members.items()})
            for g in coordinator.groups.values()}


def restarted_clients(coordinator, clients):
    for c in clients:
        c.coordinator = coordinator
    return clients


def test_a_restart_gives_back_every_group_and_members_go_on_with_the_same_epoch_and_nothing_written(restart):
    coordinator, clock, _ = restart()
    clients = [Client(coordinator, "a"), Client(coordinator, "b")]
    join(coordinator, "c", rack_id="rack-2", subscribed_topic_regex="t.*", server_assignor="uniform")
    join(coordinator, "s", instance_id="box-1")
    clients += [_Attached(coordinator, "c"), _Attached(coordinator, "s")]
    settle(coordinator.groups["g"], clients)
    coordinator.heartbeat(HeartbeatRequest("other", "x", 0, rebalance_timeout_ms=REBALANCE_MS,   # a second group
                                           subscribed_topic_names=["t"]))
    before = snapshot(coordinator)
    assert before["g"][0]["epoch"] > 1 and before["g"][0]["static_members"] == {"box-1": "s"}

    coordinator, clock, appender = restart()
    assert snapshot(coordinator) == before
    written = offsets_end(appender)
    for c in restarted_clients(coordinator, clients):
        epoch, owned = c.epoch, c.owned
        result = c.beat()                            # the same epoch and assignment: nothing to reconcile
        assert (result.member_epoch, result.assignment, c.owned) == (epoch, None, owned)
    assert coordinator.groups["g"].state is GroupState.STABLE
    assert offsets_end(appender) == written                      # heartbeats that change nothing write nothing
    assert snapshot(coordinator) == before


def test_a_restart_in_the_middle_of_a_reconciliation_goes_on_where_it_was(restart):
    coordinator, clock, _ = restart()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    settle(coordinator.groups["g"], [a, b])
    c = Client(coordinator, "c")                     # waits for partitions a and b must give up
    a.beat()
    group = coordinator.groups["g"]
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert group.members["c"].state is MemberState.UNRELEASED_PARTITIONS
    before = snapshot(coordinator)

    coordinator, clock, _ = restart()
    assert snapshot(coordinator) == before
    group = coordinator.groups["g"]
    settle(group, restarted_clients(coordinator, [a, b, c]))
    assert sorted(len(x.owned) for x in (a, b, c)) == [2, 2, 2]
    assert frozenset().union(a.owned, b.owned, c.owned) == tps(*range(6))


def test_a_restored_member_that_does_not_come_back_is_fenced_and_stays_gone(restart):
    coordinator, clock, _ = restart()
    clients = [Client(coordinator, m) for m in "abc"]
    settle(coordinator.groups["g"], clients)
    silent = clients.pop()

    coordinator, clock, _ = restart()
    restarted_clients(coordinator, clients)
    for _ in range(SESSION_MS // 5_000 - 1):
        clock.advance(5_000)
        for c in clients:
            c.beat()
    assert silent.member_id in coordinator.groups["g"].members     # still within its one session
    clock.advance(5_000)
    group = coordinator.groups["g"]
    assert silent.member_id not in group.members
    settle(group, clients)
    assert frozenset().union(*(c.owned for c in clients)) == tps(*range(6))
    refused(ErrorCode.UNKNOWN_MEMBER_ID, beat, coordinator, silent.member_id, silent.epoch)
    before = snapshot(coordinator)

    coordinator, clock, _ = restart()
    assert snapshot(coordinator) == before and silent.member_id not in coordinator.groups["g"].members


def test_members_that_left_and_deleted_groups_do_not_come_back(restart):
    coordinator, clock, _ = restart()
    a, b = Client(coordinator, "a"), Client(coordinator, "b")
    join(coordinator, "s1", instance_id="box-1")
    s1 = _Attached(coordinator, "s1")
    settle(coordinator.groups["g"], [a, b, s1])
    beat(coordinator, "b", -1)                       # leaves for good
    settle(coordinator.groups["g"], [a, s1])
    beat(coordinator, "s1", -2, instance_id="box-1")  # leaves for now: its place is kept
    kept = coordinator.groups["g"].members["s1"].assigned
    coordinator.heartbeat(HeartbeatRequest("doomed", "x", 0, rebalance_timeout_ms=REBALANCE_MS,
                                           subscribed_topic_names=["t"]))
    coordinator.heartbeat(HeartbeatRequest("doomed", "x", -1))
    assert coordinator.delete("doomed") is ErrorCode.NONE

    coordinator, clock, _ = restart()
    assert set(coordinator.groups) == {"g"} and set(coordinator.groups["g"].members) == {"a", "s1"}
    result = join(coordinator, "s2", instance_id="box-1")   # the static member's process, restarted
    assert result.assignment == kept and "s1" not in coordinator.groups["g"].members
    refused(ErrorCode.UNKNOWN_MEMBER_ID, beat, coordinator, "b", b.epoch)


def test_an_unreadable_record_is_skipped_with_a_warning(restart, caplog):
    coordinator, clock, appender = restart()
    a = Client(coordinator, "a")
    GroupStore(appender, clock).topic.write([(member_key("g", "bad"), b'{"epoch": "one"}'),   # wrong types
                                             (member_key("g", "worse"), b"not json"),
                                             (b'{"group": "g", "type": "consumer_surprise"}', b"{}"),
                                             (group_key("h"), b'{"epoch": 1}')])
    before = snapshot(coordinator)

    with caplog.at_level(logging.WARNING):
        coordinator, clock, _ = restart()
    assert sum("skipping unreadable record" in r.getMessage() for r in caplog.records) == 4
    assert snapshot(coordinator) == before and set(coordinator.groups["g"].members) == {"a"}
    restarted_clients(coordinator, [a])
    assert a.beat().member_epoch == a.epoch


def test_under_flush_always_a_change_is_fsynced_before_the_answer_and_a_refused_write_is_retried(restart,
                                                                                                  monkeypatch):
    fsyncs, broken = [], []
    real_flush = Log.flush

    def flush(plog):
        if plog.directory.name == f"{OFFSETS_TOPIC}-0":
            if broken:
                raise OSError(5, "Input/output error")
            fsyncs.append(plog.log_end_offset)
        real_flush(plog)
    monkeypatch.setattr(Log, "flush", flush)
    coordinator, clock, appender = restart(flush="always")

    async def heartbeats():   # as ConsumerGroupHeartbeat answers them
        a = await coordinator.answer(joining("a"))
        assert fsyncs == [offsets_end(appender)]          # the join: its records written, then fsynced
        for _ in range(5):
            await coordinator.answer(HeartbeatRequest("g", "a", a.member_epoch, owned=a.assignment))
        assert len(fsyncs) == 1                            # heartbeats that change nothing: no write, no fsync

        broken.append(True)
        with pytest.raises(ConsumerGroupError) as caught:  # b's join is not durable
            await coordinator.answer(joining("b"))
        assert caught.value.code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        broken.clear()
        b = await coordinator.answer(joining("b"))    # the client's retry: what was not written is written now
        assert b.member_epoch == 2 and len(fsyncs) == 2
    asyncio.run(heartbeats())
    before = snapshot(coordinator)
    coordinator, clock, _ = restart(flush="always")
    assert snapshot(coordinator) == before and set(coordinator.groups["g"].members) == {"a", "b"}


def test_under_flush_always_the_fsync_runs_off_the_event_loop_and_the_heartbeat_waits_for_it(restart, monkeypatch):
    """While the fsync of a join's records is held, the event loop answers another group's
    heartbeat; the join is answered only once its fsync round is done, and so is the client's
    retry of it, which has nothing new to write; a waiter that goes away cancels no other's wait."""
    held, in_fsync, release, fsync_threads = [], threading.Event(), threading.Event(), []
    real_flush = Log.flush

    def flush(plog):
        if plog.directory.name == f"{OFFSETS_TOPIC}-0" and held:
            fsync_threads.append(threading.get_ident())
            in_fsync.set()
            release.wait(10)
        real_flush(plog)
    monkeypatch.setattr(Log, "flush", flush)
    coordinator, clock, appender = restart(flush="always")

    async def heartbeats():
        loop_thread = threading.get_ident()
        x = await coordinator.answer(joining("x", group_id="other"))
        held.append(True)
        join_a = asyncio.ensure_future(coordinator.answer(joining("a")))
        assert await asyncio.to_thread(in_fsync.wait, 10)
        retry_a, gone = (asyncio.ensure_future(coordinator.answer(joining("a"))) for _ in range(2))
        await asyncio.sleep(0)                            # their steps run: they write nothing
        gone.cancel()                                     # its connection closed
        steady = await coordinator.answer(HeartbeatRequest("other", "x", x.member_epoch, owned=x.assignment))
        assert steady.member_epoch == x.member_epoch and steady.synced is None   # another group's: not held
        assert not join_a.done() and not retry_a.done()   # a's records' fsync is not done: no answer yet
        release.set()
        assert (await join_a).member_epoch == (await retry_a).member_epoch == 1
        assert fsync_threads and loop_thread not in fsync_threads
    asyncio.run(heartbeats())
    assert offsets_end(appender) <= appender.log_manager.get_log(OFFSETS_TOPIC, 0).recovery_point
