"""The share-partition state machine and the share coordinator, stepped in-process with a manual clock."""
from __future__ import annotations

import pytest

from headwater.broker.share.partition import (AcknowledgeError, AcknowledgeType as Ack, Acquired, RecordState,
                                              SharePartition)
from headwater.protocol.errors import ErrorCode

from tests.support.parts import close_appender, open_appender

LOCK_MS = 30_000


@pytest.fixture
def archived():
    return []


@pytest.fixture
def sp(clock, archived):
    return SharePartition(clock, 0, lock_duration_ms=LOCK_MS, delivery_count_limit=3,
                          on_archived=lambda offset, count, why: archived.append((offset, count, why)))


def test_members_acquire_distinct_records_and_accept_advances_the_start_offset(sp):
    assert sp.acquire("a", 3, until=10) == [Acquired(0, 2, 1)]
    assert sp.acquire("b", 3, until=10) == [Acquired(3, 5, 1)]
    sp.acknowledge("b", [(3, 5, [Ack.ACCEPT])])
    assert sp.start_offset == 0                        # 0-2 are still in flight
    sp.acknowledge("a", [(0, 2, [Ack.ACCEPT])])
    assert (sp.start_offset, sp.end_offset, sp.records) == (6, 6, {})


def test_acquire_stops_at_the_log_end(sp):
    assert sp.acquire("a", 100, until=4) == [Acquired(0, 3, 1)]
    assert sp.acquire("b", 100, until=4) == []


def test_lock_expiry_makes_records_available_with_the_next_delivery_count(sp, clock):
    sp.acquire("a", 2, until=2)
    clock.advance(LOCK_MS - 1)
    assert sp.count(RecordState.ACQUIRED) == 2
    clock.advance(1)
    assert sp.count(RecordState.AVAILABLE) == 2
    assert sp.acquire("b", 5, until=2) == [Acquired(0, 1, 2)]
    with pytest.raises(AcknowledgeError) as exc:          # the dead member's lock is gone
        sp.acknowledge("a", [(0, 1, [Ack.ACCEPT])])
    assert exc.value.code == ErrorCode.INVALID_RECORD_STATE


def test_an_old_lock_does_not_release_a_newer_acquisition(sp, clock):
    sp.acquire("a", 1, until=1)
    sp.acknowledge("a", [(0, 0, [Ack.RELEASE])])
    clock.advance(LOCK_MS // 2)
    sp.acquire("a", 1, until=1)                 # a new lock, due later than the first
    clock.advance(LOCK_MS // 2)
    assert sp.records[0].state == RecordState.ACQUIRED


def test_release_reject_and_gap(sp, archived):
    sp.acquire("a", 3, until=3)
    sp.acknowledge("a", [(0, 2, [Ack.RELEASE, Ack.REJECT, Ack.GAP])])
    assert sp.records[0].state == RecordState.AVAILABLE
    assert sp.records[1].state == RecordState.ARCHIVED and sp.records[2].state == RecordState.ARCHIVED
    assert archived == [(1, 1, "rejected by the consumer")]   # a gap has no record to dead-letter
    assert sp.acquire("a", 3, until=3) == [Acquired(0, 0, 2)]
    sp.acknowledge("a", [(0, 0, [Ack.ACCEPT])])
    assert sp.start_offset == 3


def test_the_delivery_count_limit_archives_a_poison_record(sp, clock, archived):
    for delivery in (1, 2, 3):
        assert sp.acquire("a", 1, until=1) == [Acquired(0, 0, delivery)]
        clock.advance(LOCK_MS)
    assert sp.acquire("a", 1, until=1) == []
    assert archived == [(0, 3, "delivery count limit reached (acquisition lock expired)")]
    assert sp.start_offset == 1


def test_a_member_that_leaves_gives_its_records_back(sp):
    sp.acquire("a", 2, until=2)
    assert sp.release_member("a") == 2
    assert sp.acquire("b", 5, until=2) == [Acquired(0, 1, 2)]


@pytest.mark.parametrize("batches, code", [
    ([(0, 1, [Ack.ACCEPT])], ErrorCode.INVALID_RECORD_STATE),               # offset 1 is another member's
    ([(0, 0, [Ack.ACCEPT]), (5, 5, [Ack.ACCEPT])], ErrorCode.INVALID_RECORD_STATE),   # never acquired
    ([(0, 0, [7])], ErrorCode.INVALID_REQUEST),                             # no such acknowledge type
    ([(0, 0, [Ack.ACCEPT, Ack.ACCEPT])], ErrorCode.INVALID_REQUEST),        # types do not match the range
    ([(1, 0, [Ack.ACCEPT])], ErrorCode.INVALID_REQUEST),                    # last before first
])
def test_bad_acknowledgements_change_nothing(sp, batches, code):
    sp.acquire("a", 1, until=5)
    sp.acquire("b", 1, until=5)
    with pytest.raises(AcknowledgeError) as exc:
        sp.acknowledge("a", batches)
    assert exc.value.code == code
    assert [(o, r.state, r.member) for o, r in sp.records.items()] == [
        (0, RecordState.ACQUIRED, "a"), (1, RecordState.ACQUIRED, "b")]



def test_a_rolled_back_acknowledgement_leaves_its_records_acquired_and_others_changes_alone(sp, clock, archived):
    sp.acquire("a", 4, until=4)
    sp.acquire("b", 4, until=8)
    undo = sp.acknowledge("a", [(0, 1, [Ack.ACCEPT]), (2, 3, [Ack.REJECT])])
    sp.acknowledge("b", [(4, 7, [Ack.ACCEPT])])         # meanwhile, durably
    assert (sp.start_offset, sp.archived_total) == (8, 2)
    sp.roll_back(undo)
    assert (sp.start_offset, sp.archived_total) == (0, 0)
    assert [(o, r.state, r.member) for o, r in sp.records.items()] == [
        *((o, RecordState.ACQUIRED, "a") for o in range(4)), *((o, RecordState.ACKNOWLEDGED, None) for o in range(4, 8))]
    assert archived == [(2, 1, "rejected by the consumer"), (3, 1, "rejected by the consumer")]   # written, stays
    clock.advance(LOCK_MS)                                # a's lock, cancelled by the acknowledgement, is back
    assert sp.acquire("c", 10, until=8) == [Acquired(0, 3, 2)]


def test_a_rolled_back_release_leaves_records_acquired_again_since_with_their_new_acquisition(sp, clock):
    sp.acquire("a", 4, until=4)
    undo = sp.acknowledge("a", [(0, 3, [Ack.RELEASE])])
    assert sp.acquire("b", 2, until=4) == [Acquired(0, 1, 2)]
    sp.roll_back(undo)
    assert [(o, r.member, r.delivery_count) for o, r in sp.records.items()] == [
        (0, "b", 2), (1, "b", 2), (2, "a", 1), (3, "a", 1)]
    sp.acknowledge("a", [(2, 3, [Ack.ACCEPT])])
    sp.acknowledge("b", [(0, 1, [Ack.ACCEPT])])
    assert (sp.start_offset, sp.records) == (4, {})


def test_nothing_is_rolled_back_into_records_removed_from_the_log(sp):
    sp.acquire("a", 4, until=4)
    undo = sp.acknowledge("a", [(0, 1, [Ack.ACCEPT])])
    sp.reset_to(3)
    sp.roll_back(undo)
    assert (sp.start_offset, [(o, r.member) for o, r in sp.records.items()]) == (3, [(3, "a")])

def test_records_removed_from_the_log_are_skipped(sp):
    sp.acquire("a", 2, until=4)
    sp.reset_to(3)
    assert (sp.start_offset, sp.records) == (3, {})
    assert sp.acquire("a", 5, until=4) == [Acquired(3, 3, 1)]


# --- the coordinator: members, epochs, sessions --------------------------------------------

@pytest.fixture
def share(tmp_path, clock):
    from headwater.broker.share.coordinator import ShareCoordinator
    from headwater.log import LogManager
    manager = LogManager(tmp_path)
    manager.create_topic("orders", 2)
    yield ShareCoordinator(manager, clock, is_classic_group=lambda g: g == "classic")
    manager.close()


def test_members_share_out_the_partitions_and_are_fenced_on_a_stale_epoch(share):
    from headwater.broker.share.coordinator import ShareError
    a, assignment = share.heartbeat("g", "a", 0, ["orders"])
    assert assignment == {"orders": [0, 1]}                         # alone: every partition
    b, assignment = share.heartbeat("g", "b", 0, ["orders"])
    assert assignment == {"orders": [1]} and (a.epoch, b.epoch) == (1, 1)
    assert share.heartbeat("g", "a", 1, None) == (a, {"orders": [0]}) and a.epoch == 2   # a gives one up
    assert share.heartbeat("g", "a", 2, None) == (a, None)          # unchanged: no assignment sent
    share.heartbeat("g", "b", -1, None)
    assert share.heartbeat("g", "a", 2, None) == (a, {"orders": [0, 1]})                  # b left
    with pytest.raises(ShareError) as exc:
        share.heartbeat("g", "a", 7, None)
    assert exc.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(ShareError) as exc:
        share.heartbeat("g", "nobody", 1, None)
    assert exc.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(ShareError) as exc:
        share.heartbeat("classic", "a", 0, ["orders"])
    assert exc.value.code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_a_member_that_stops_heartbeating_expires(share, clock):
    share.heartbeat("g", "a", 0, ["orders"])
    clock.advance(44_999)
    assert "a" in share.groups["g"].members
    clock.advance(1)
    assert share.groups["g"].members == {}


def test_share_session_epochs(share):
    from headwater.broker.share.coordinator import ShareError
    share.heartbeat("g", "a", 0, ["orders"])
    with pytest.raises(ShareError) as exc:
        share.session("g", "a", 1)
    assert exc.value.code == ErrorCode.SHARE_SESSION_NOT_FOUND
    assert share.session("g", "a", 0).epoch == 1
    share.session("g", "a", 1)
    with pytest.raises(ShareError) as exc:
        share.session("g", "a", 1)                  # a replayed epoch
    assert exc.value.code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
    assert share.session("g", "a", 2) is not None
    assert share.session("g", "a", -1) is None
    with pytest.raises(ShareError) as exc:
        share.session("unknown", "a", 0)
    assert exc.value.code == ErrorCode.GROUP_ID_NOT_FOUND


def test_a_member_that_left_may_still_close_its_session_with_its_final_acknowledgement(share, clock):
    """librdkafka sends its leaving heartbeat and its final ShareAcknowledge on two connections at
    once: whichever arrives first, the acknowledgement counts and nothing it accepted is redelivered."""
    from headwater.broker.share.coordinator import ShareError
    share.log_manager.get_log("orders", 0).append(bytearray(_batch(3)))
    share.alter_configs("g", {"share.auto.offset.reset": "earliest"})
    share.heartbeat("g", "a", 0, ["orders"])
    share.heartbeat("g", "b", 0, ["orders"])
    group = share.groups["g"]
    share.session("g", "a", 0)
    sp = share.share_partition(group, "orders", 0)
    assert sp.acquire("a", 3, until=3) == [Acquired(0, 2, 1)]
    share.heartbeat("g", "a", -1, None)                        # the leave arrives first
    assert sp.acquire("b", 3, until=3) == []                   # a's records wait for its final acknowledgement
    with pytest.raises(ShareError) as exc:                     # a departed member may only close its session
        share.session("g", "a", 1)
    assert exc.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    assert share.session("g", "a", -1) is None
    sp.acknowledge("a", [(0, 1, [Ack.ACCEPT])])
    share.release(group, "a")                                  # what closing a session does after its acks
    assert sp.acquire("b", 3, until=3) == [Acquired(2, 2, 2)]
    with pytest.raises(ShareError) as exc:                     # the session is gone with it
        share.session("g", "a", -1)
    assert exc.value.code == ErrorCode.UNKNOWN_MEMBER_ID


def test_a_departed_members_session_that_never_closes_gives_its_records_back(share, clock):
    share.log_manager.get_log("orders", 0).append(bytearray(_batch(2)))
    share.alter_configs("g", {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"})
    share.heartbeat("g", "a", 0, ["orders"])
    share.session("g", "a", 0)
    sp = share.share_partition(share.groups["g"], "orders", 0)
    sp.acquire("a", 2, until=2)
    share.heartbeat("g", "a", -1, None)
    clock.advance(4_999)
    assert sp.count(RecordState.ACQUIRED) == 2
    clock.advance(1)
    assert sp.count(RecordState.AVAILABLE) == 2 and share.groups["g"].sessions == {}


def test_a_member_that_rejoins_keeps_the_session_it_left_with(share, clock):
    share.heartbeat("g", "a", 0, ["orders"])
    share.session("g", "a", 0)
    share.heartbeat("g", "a", -1, None)
    share.heartbeat("g", "a", 0, ["orders"])
    clock.advance(30_000)                          # the record lock duration: a departed session would close
    assert share.session("g", "a", 1).epoch == 2


def _batch(n: int) -> bytes:
    from headwater.records import Record, encode_batch
    return encode_batch([Record(i, 0, None, b"v") for i in range(n)])


def test_acquire_stops_below_until_and_archives_aborted_records(sp, archived):
    assert sp.acquire("a", 10, until=3, aborted=[(1, 1)]) == [Acquired(0, 0, 1), Acquired(2, 2, 1)]
    assert sp.records[1].state == RecordState.ARCHIVED and archived == []      # not a dead letter
    assert sp.end_offset == 3
    sp.acknowledge("a", [(0, 0, [Ack.ACCEPT]), (2, 2, [Ack.RELEASE])])
    assert sp.first_acquirable() == 2 and sp.start_offset == 2
    assert sp.acquire("b", 10, until=6, aborted=[(4, 5)]) == [Acquired(2, 2, 2), Acquired(3, 3, 1)]
    assert (sp.end_offset, sp.first_acquirable()) == (6, 6)


def test_the_in_flight_window_is_bounded_as_kafka_bounds_it(sp):
    """New records are counted only up to the bound (a fetch rounds that up to a batch end, which
    ``until`` stands for here) and are acquired only while fewer are in flight; redeliveries are not held back."""
    from headwater.broker.share.partition import MAX_IN_FLIGHT
    assert sp.offset_after(MAX_IN_FLIGHT + 10) == MAX_IN_FLIGHT
    assert sp.acquire("a", MAX_IN_FLIGHT + 10, until=MAX_IN_FLIGHT + 10) == [Acquired(0, MAX_IN_FLIGHT + 9, 1)]
    assert sp.offset_after(10) == sp.end_offset and sp.acquire("b", 10, until=10**6) == []
    sp.acknowledge("a", [(0, 9, [Ack.ACCEPT]), (10, 14, [Ack.RELEASE])])     # 2,000 in flight: still full
    assert sp.offset_after(10) == 15 and sp.acquire("b", 10, until=10**6) == [Acquired(10, 14, 2)]
    sp.acknowledge("b", [(10, 14, [Ack.ACCEPT])])        # 1,995 in flight: room for 5 new records
    assert sp.offset_after(10) == MAX_IN_FLIGHT + 15
    assert sp.acquire("b", 10, until=MAX_IN_FLIGHT + 15) == [Acquired(MAX_IN_FLIGHT + 10, MAX_IN_FLIGHT + 14, 1)]


def test_topic_ids_are_stable_and_catalogs_without_them_get_them(tmp_path):
    import json

    from headwater.log import LogManager
    manager = LogManager(tmp_path)
    topic_id = manager.create_topic("orders", 1).topic_id
    manager.close()
    catalog = json.loads((tmp_path / "catalog.json").read_text())
    assert catalog["topics"]["orders"]["id"] == str(topic_id)
    manager = LogManager(tmp_path)
    assert manager.topics["orders"].topic_id == topic_id and manager.topic_by_id(topic_id).name == "orders"
    manager.close()
    del catalog["topics"]["orders"]["id"]                       # a catalog from before topic IDs
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    manager = LogManager(tmp_path)
    given = manager.topics["orders"].topic_id
    manager.close()
    reopened = LogManager(tmp_path)
    assert given != topic_id and reopened.topics["orders"].topic_id == given     # written down at once
    reopened.close()


# --- durability: __share_group_state replayed by a new coordinator over the same data directory --

def _restarted(tmp_path, clock, appender=None):
    """The share coordinator as a (re)started broker builds it: its store over the append path."""
    from headwater.broker.share.coordinator import ShareCoordinator
    from headwater.broker.share.store import ShareStateStore
    if appender is not None:
        close_appender(appender)
    appender = open_appender(tmp_path / "data")
    store = ShareStateStore(appender, clock)
    return ShareCoordinator(appender.log_manager, clock, store=store), appender


def _member_on_orders(tmp_path, clock, group_id: str):
    """A fresh coordinator with member "a" of ``group_id`` reading topic "orders" from the start:
    (coordinator, appender, group, the share-partition)."""
    share, appender = _restarted(tmp_path, clock)
    appender.log_manager.create_topic("orders", 1)
    share.alter_configs(group_id, {"share.auto.offset.reset": "earliest"})
    share.heartbeat(group_id, "a", 0, ["orders"])
    group = share.groups[group_id]
    return share, appender, group, share.share_partition(group, "orders", 0)


def test_a_restarted_broker_replays_share_state_and_deletion(tmp_path, clock):
    share, appender = _restarted(tmp_path, clock)
    appender.log_manager.create_topic("orders", 1)
    share.alter_configs("g", {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "4"})
    share.heartbeat("g", "a", 0, ["orders"])
    group = share.groups["g"]
    sp = share.share_partition(group, "orders", 0)
    sp.acquire("a", 4, until=4)
    sp.acknowledge("a", [(0, 0, [Ack.ACCEPT]), (2, 2, [Ack.ACCEPT]), (3, 3, [Ack.REJECT])])
    share.changed(group, "orders", 0)

    share, appender = _restarted(tmp_path, clock, appender)
    group = share.groups["g"]
    assert group.config.int("share.delivery.count.limit") == 4
    sp = share.share_partition(group, "orders", 0)
    assert (sp.start_offset, sp.end_offset, sp.archived_total) == (1, 4, 1)
    assert [(o, r.state, r.delivery_count) for o, r in sp.records.items()] == [
        (1, RecordState.AVAILABLE, 1), (2, RecordState.ACKNOWLEDGED, 1), (3, RecordState.ARCHIVED, 1)]
    assert share.delete("g") == ErrorCode.NONE

    share, appender = _restarted(tmp_path, clock, appender)
    assert (share.groups, share.configs) == ({}, {})
    close_appender(appender)


def test_a_deleted_topic_takes_its_share_partitions_along(tmp_path, clock):
    share, appender = _restarted(tmp_path, clock)
    appender.log_manager.create_topic("orders", 1)
    share.heartbeat("g", "a", 0, ["orders"])
    group = share.groups["g"]
    share.share_partition(group, "orders", 0).acquire("a", 5, until=5)
    share.changed(group, "orders", 0)
    appender.log_manager.delete_topic("orders")     # as Broker.delete_topic does
    share.forget_topic("orders")
    appender.log_manager.create_topic("orders", 1)
    assert group.partitions == {}
    assert share.share_partition(group, "orders", 0).acquire("a", 5, until=1) == [Acquired(0, 0, 1)]
    share, appender = _restarted(tmp_path, clock, appender)   # the tombstone keeps the old state gone after a restart
    assert share.groups == {}
    close_appender(appender)


def test_an_operator_moves_and_forgets_the_start_offsets_of_an_empty_group_only(tmp_path, clock):
    from headwater.broker.share.coordinator import ShareError
    share, appender = _restarted(tmp_path, clock)
    appender.log_manager.create_topic("orders", 2)
    share.heartbeat("g", "a", 0, ["orders"])
    group = share.groups["g"]
    sp = share.share_partition(group, "orders", 0)
    sp.acquire("a", 4, until=6)
    sp.acknowledge("a", [(1, 1, [Ack.ACCEPT])])
    assert (sp.start_offset, sp.lag(6)) == (0, 5)          # 0, 2-5 not yet delivered for good
    for change in (lambda: share.move_start_offsets("g", {("orders", 0): 5}),
                   lambda: share.delete_start_offsets("g", {"orders"})):
        with pytest.raises(ShareError) as exc:
            change()
        assert exc.value.code == ErrorCode.NON_EMPTY_GROUP
    assert (sp.start_offset, sp.count(RecordState.ACQUIRED)) == (0, 3)

    share.heartbeat("g", "a", -1, None)
    share.move_start_offsets("g", {("orders", 0): 5, ("orders", 1): 2})
    assert (sp.start_offset, sp.end_offset, sp.records, sp.lag(6)) == (5, 5, {}, 1)
    clock.advance(LOCK_MS)                                   # the forgotten locks were cancelled
    assert sp.records == {}
    share.move_start_offsets("never-joined", {("orders", 1): 0})   # created, as Kafka

    share, appender = _restarted(tmp_path, clock, appender)
    assert {key: s.start_offset for key, s in share.states("g").items()} == {("orders", 0): 5, ("orders", 1): 2}
    assert {key: s.start_offset for key, s in share.states("never-joined").items()} == {("orders", 1): 0}
    share.delete_start_offsets("g", {"orders"})
    assert share.states("g") == {}

    share, appender = _restarted(tmp_path, clock, appender)   # the tombstones keep them gone
    assert "g" not in share.groups and list(share.states("never-joined")) == [("orders", 1)]
    close_appender(appender)


def test_one_acquisition_reports_runs_split_at_gaps_and_at_changes_of_delivery_count(sp):
    sp.acquire("a", 10, until=10)
    sp.acknowledge("a", [(0, 9, [Ack.RELEASE, Ack.ACCEPT, Ack.RELEASE, Ack.RELEASE, Ack.ACCEPT,
                                 Ack.ACCEPT, Ack.ACCEPT, Ack.ACCEPT, Ack.RELEASE, Ack.ACCEPT])])
    sp.acquire("a", 1, until=10)                           # offset 0 again: delivery count 2
    sp.acknowledge("a", [(0, 0, [Ack.RELEASE])])
    runs = sp.acquire("b", 8, until=14)
    # Ground truth: every acquired offset with its delivery count, merged into runs in plain Python.
    counts = {0: 3, 2: 2, 3: 2, 8: 2, 10: 1, 11: 1, 12: 1, 13: 1}
    expected: list[list[int]] = []
    for offset, count in counts.items():
        if expected and expected[-1][1] == offset - 1 and expected[-1][2] == count:
            expected[-1][1] = offset
        else:
            expected.append([offset, offset, count])
    assert runs == [Acquired(*run) for run in expected]


def test_share_state_is_persisted_as_ranges_and_replays_record_by_record(tmp_path, clock):
    from headwater.broker.share.store import _partition_value, restore
    share, appender, group, sp = _member_on_orders(tmp_path, clock, "g")
    sp.acquire("a", 1000, until=1000)
    kinds = [Ack.RELEASE] * 10 + [Ack.ACCEPT] * 490 + [Ack.REJECT] * 100 + [Ack.ACCEPT] * 200
    sp.acknowledge("a", [(10, 809, kinds)])
    before = {o: (r.state, r.delivery_count) for o, r in sp.records.items()}
    # Ground truth in plain Python: what a restart keeps, record by record (acquired -> available).
    expected = {o: (RecordState.AVAILABLE if state == RecordState.ACQUIRED else state, count)
                for o, (state, count) in before.items()}
    assert len(_partition_value(sp)["ranges"]) == 6     # runs, not 1,000 records
    share.changed(group, "orders", 0)

    share, appender = _restarted(tmp_path, clock, appender)
    sp = share.share_partition(share.groups["g"], "orders", 0)
    assert {o: (r.state, r.delivery_count) for o, r in sp.records.items()} == expected
    # A state persisted before ranges, one entry per record, still restores.
    old = SharePartition(clock, 0, lock_duration_ms=LOCK_MS, delivery_count_limit=3)
    restore(old, {"start": 0, "end": 1000, "archived": 100, "dead_lettered": 0,
                  "records": [[o, int(state), count] for o, (state, count) in before.items() if count]})
    assert {o: (r.state, r.delivery_count) for o, r in old.records.items()} == expected
    close_appender(appender)


def test_truncating_part_of_an_acquisition_keeps_the_lock_of_the_rest(sp, clock):
    sp.acquire("a", 5, until=5)
    sp.reset_to(2)                      # 0-1 gone from the log (retention)
    clock.advance(LOCK_MS)
    assert [(o, r.state, r.delivery_count) for o, r in sp.records.items()] == [
        (2, RecordState.AVAILABLE, 1), (3, RecordState.AVAILABLE, 1), (4, RecordState.AVAILABLE, 1)]


def test_acknowledgement_batches_out_of_order_or_overlapping_are_invalid_and_change_nothing(sp):
    sp.acquire("a", 6, until=6)
    for batches in ([(3, 4, [Ack.ACCEPT]), (0, 1, [Ack.ACCEPT])], [(0, 3, [Ack.ACCEPT]), (3, 4, [Ack.RELEASE])]):
        with pytest.raises(AcknowledgeError) as exc:
            sp.acknowledge("a", batches)
        assert exc.value.code == ErrorCode.INVALID_REQUEST
    assert sp.count(RecordState.ACQUIRED) == 6


def test_a_share_partitions_state_records_and_its_tombstone_share_the_keys_bytes(tmp_path, clock):
    """Compaction keeps the latest record of each key's bytes: every state record of a
    share-partition, and the tombstone that forgets it, carry the same key bytes, those JSON with
    sorted keys and escaped non-ASCII made before (values are compared only as JSON)."""
    import json
    share, appender, group, sp = _member_on_orders(tmp_path, clock, "gé")
    sp.acquire("a", 10, until=10)
    share.changed(group, "orders", 0)
    sp.acknowledge("a", [(0, 9, [Ack.ACCEPT])])
    share.changed(group, "orders", 0)
    share.forget_topic("orders")
    state_log = appender.log_manager.get_log("__share_group_state", 0)
    records = [r for r in state_log.records(0, upto=state_log.log_end_offset) if b'"partition"' in r.key]
    expected = json.dumps({"group": "gé", "type": "partition", "topic": "orders", "partition": 0},
                          sort_keys=True, separators=(",", ":")).encode()
    assert [r.key for r in records] == [expected] * 3
    assert [json.loads(r.value) if r.value is not None else None for r in records] == [
        {"start": 0, "end": 10, "ranges": [[0, 9, int(RecordState.ACQUIRED), 1]], "archived": 0, "dead_lettered": 0},
        {"start": 10, "end": 10, "ranges": [], "archived": 0, "dead_lettered": 0}, None]
    close_appender(appender)


def test_acknowledgements_are_fsynced_before_the_answer_and_acquisitions_are_not_waited_for(tmp_path, clock):
    import asyncio

    from headwater.broker.share.coordinator import Changes, ShareCoordinator
    from headwater.broker.share.store import ShareStateStore
    appender = open_appender(tmp_path / "data", flush="always")
    share = ShareCoordinator(appender.log_manager, clock, store=ShareStateStore(appender, clock))
    appender.log_manager.create_topic("orders", 1)
    share.alter_configs("g", {"share.auto.offset.reset": "earliest"})
    share.heartbeat("g", "a", 0, ["orders"])
    group = share.groups["g"]
    sp = share.share_partition(group, "orders", 0)
    rounds = appender.fsync_rounds

    state_log = appender.log_manager.get_log("__share_group_state", 0)

    async def request(change) -> int:
        """One request's changes persisted: how many fsync rounds it waited for."""
        before, batch, end = rounds.rounds, Changes(), state_log.log_end_offset
        change(batch)
        share.changed(group, "orders", 0, batch)
        persisted = share.persist(group, batch)
        assert state_log.log_end_offset == end + 1      # written at the call: a ShareFetch acquires meanwhile
        await persisted
        return rounds.rounds - before

    def acknowledge(batch):
        sp.acknowledge("a", [(0, 4, [Ack.ACCEPT])])
        batch.acknowledged = True

    assert asyncio.run(request(lambda batch: sp.acquire("a", 10, until=10))) == 0
    assert asyncio.run(request(acknowledge)) == 1
    close_appender(appender)

    share, appender = _restarted(tmp_path, clock)      # both written: the acquisition's delivery counts too
    sp = share.share_partition(share.groups["g"], "orders", 0)
    assert (sp.start_offset, [(o, r.delivery_count) for o, r in sp.records.items()]) == (
        5, [(5, 1), (6, 1), (7, 1), (8, 1), (9, 1)])
    close_appender(appender)


def test_a_share_fetch_is_not_answered_before_its_acknowledgements_are_on_disk(tmp_path, clock, monkeypatch):
    """The ShareFetch handler in-process, its broker's fsyncs held by a stand-in storage: the
    request that acknowledges writes the state record at once, acquires the next records and
    encodes its response while the fsync is held, and is answered only once the fsync is done."""
    import asyncio
    import threading

    from headwater.broker.broker import Broker
    from headwater.broker.config import BrokerConfig
    from headwater.broker.fsync_rounds import GroupCommit
    from headwater.broker.share.share_group_apis import share_fetch
    from headwater.broker.share.state_records import STATE_TOPIC
    from headwater.protocol.share_fetch_response import ShareFetchResponse
    from headwater.protocol.share_messages import ShareFetchRequest
    from headwater.records import Record, encode_batch

    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="always"), clock=clock)
    gate, started, events = threading.Event(), threading.Event(), []
    encode = ShareFetchResponse.encode

    def encoding(response, version):     # the real encoder, its calls in the events
        events.append("encoded")
        return encode(response, version)
    monkeypatch.setattr(ShareFetchResponse, "encode", encoding)

    def held_fsync(plog) -> None:       # the storage: an fsync returns once the test lets it
        started.set()
        gate.wait()
        plog.flush()
        events.append("fsync done")
    broker.appender.fsync_rounds = GroupCommit(held_fsync)
    topic = broker.log_manager.create_topic("orders", 1)
    for _ in range(2):     # two batches: a ShareFetch acquires whole batches
        broker.appender.append("orders", 0, encode_batch([Record(i, 0, None, b"v") for i in range(10)]),
                               flush_policy=False)
    broker.share.alter_configs("g", {"share.auto.offset.reset": "earliest"})
    broker.share.heartbeat("g", "a", 0, ["orders"])
    Partition = ShareFetchRequest.FetchTopic.FetchPartition

    def request(epoch: int, acks: list):
        return ShareFetchRequest(group_id="g", member_id="a", share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
                                 max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=[],
                                 topics=[ShareFetchRequest.FetchTopic(topic_id=topic.topic_id, partitions=[Partition(
                                     partition_index=0, acknowledgement_batches=[
                                         Partition.AcknowledgementBatch(first_offset=f, last_offset=l,
                                                                        acknowledge_types=[Ack.ACCEPT])
                                         for f, l in acks])])])

    async def rounds():
        gate.set()
        first = await share_fetch(broker, None, request(0, []))
        assert first.responses[0].partitions[0].acquired_records == [Acquired(0, 9, 1)]
        gate.clear()
        started.clear()
        state_end = broker.log_manager.get_log(STATE_TOPIC, 0).log_end_offset
        answer = asyncio.create_task(share_fetch(broker, None, request(1, [(0, 9)])))
        assert await asyncio.to_thread(started.wait, 60)
        for _ in range(20):
            await asyncio.sleep(0)
        assert not answer.done()                        # acquired, written, and held by its fsync
        assert broker.log_manager.get_log(STATE_TOPIC, 0).log_end_offset == state_end + 2   # acks, acquisitions
        gate.set()
        second = await answer
        events.append("answered")
        return second

    try:
        second = asyncio.run(rounds())
    finally:
        gate.set()
        broker.appender.fsync_rounds.close()
        broker.close()
    partition = second.responses[0].partitions[0]
    assert (partition.acknowledge_error_code, partition.acquired_records) == (0, [Acquired(10, 19, 1)])
    assert events[-3:] == ["encoded", "fsync done", "answered"]
    body = second.encode(1)                             # the server's encoding: the body made during the fsync
    second.throttle_time_ms = 0                         # setting a field makes it encode afresh
    assert second.encode(1) == body
    share, appender = _restarted(tmp_path, clock)       # the acknowledgement is in the state replayed
    assert share.share_partition(share.groups["g"], "orders", 0).start_offset == 10
    close_appender(appender)
