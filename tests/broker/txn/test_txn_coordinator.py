"""The transaction coordinator's state machine, stepped in-process with a clock moved by hand.

The coordinator with what it is given, and no Broker: the broker's append path over logs
in a temporary directory (its logs, __transaction_state and __consumer_offsets are real),
the group coordinator and producer ids; each test calls the coordinator as the transaction API
handlers do, appends transactional batches as a Produce does, and checks the partition's
last stable offset, its markers and its aborted index against what it wrote. The wire
tests in tests/broker/txn/test_transactions*.py are the outer layer.
"""
import time

import pytest

from headwater.broker.groups.group import CommittedOffset
from headwater.broker.producer_state import ProducerIds
from headwater.broker.txn.coordinator import ID_EXPIRATION_MS, TransactionCoordinator
from headwater.broker.txn.store import TransactionStore
from headwater.broker.txn.transaction import TxnState
from headwater.log.cleaner import clean_log
from headwater.log.txn_index import AbortedTxn
from headwater.protocol.errors import ErrorCode
from headwater.records import Record, decode_records, encode_batch, iter_batches
from headwater.records.control import marker_is_commit
from headwater.records.layout import ATTR_TRANSACTIONAL

from tests.support.small_disk import fill_up, small_disk
from tests.support.parts import close_appender, open_appender, open_groups

E = ErrorCode
TIMEOUT_MS = 60_000
FAR_FUTURE_MS = 2**62  # past every record's min.compaction.lag.ms (markers carry the wall-clock time)


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


class Core:
    """The transaction coordinator wired as the broker wires it, over logs in ``data_dir``."""

    def __init__(self, data_dir, clock, flush="never"):
        self.appender = open_appender(data_dir, flush)
        self.log_manager, self.txn_partitions = self.appender.log_manager, self.appender.txn_partitions
        self.groups = open_groups(self.appender, clock)
        store = TransactionStore(self.appender, clock)
        self.transactions = TransactionCoordinator(store, clock, self.txn_partitions, ProducerIds(data_dir).allocate,
                                                   self.groups)

    def close(self) -> None:
        close_appender(self.appender)


def open_core(data_dir, clock) -> Core:
    core = Core(data_dir, clock)
    for topic in ("t", "u"):
        if topic not in core.log_manager.topics:
            core.log_manager.create_topic(topic, 2)
    return core


@pytest.fixture
def core(data_dir, clock):
    core = open_core(data_dir, clock)
    yield core
    core.close()


class Producer:
    """What a transactional client does, as calls on the coordinator and appends to the log."""

    def __init__(self, core, txn_id="app"):
        self.core, self.txn_id = core, txn_id
        self.sequences = {}
        error, self.pid, self.epoch = core.transactions.init_producer_id(txn_id, TIMEOUT_MS)
        assert error == E.NONE

    def send(self, topic, partition, *values) -> int:
        """Add the partition and append one transactional batch; its base offset."""
        assert self.core.transactions.add_partitions(self.txn_id, self.pid, self.epoch, [(topic, partition)]) == 0
        assert self.core.transactions.verify_produce(self.txn_id, self.pid, self.epoch, (topic, partition)) == 0
        seq = self.sequences.get((topic, partition), 0)
        batch = encode_batch([Record(i, 1000, None, v) for i, v in enumerate(values)], producer_id=self.pid,
                             producer_epoch=self.epoch, base_sequence=seq, attributes=ATTR_TRANSACTIONAL)
        self.sequences[(topic, partition)] = seq + len(values)
        result = self.core.appender.append(topic, partition, batch)
        assert result.error == E.NONE
        return result.base_offset

    def end(self, commit: bool) -> ErrorCode:
        return self.core.transactions.end_txn(self.txn_id, self.pid, self.epoch, commit)


def lso(core, topic="t", partition=0) -> int:
    return core.txn_partitions.last_stable_offset(topic, partition, core.log_manager.get_log(topic, partition))


def batches(core, topic="t", partition=0):
    """Every batch of the partition, decoded (a read stops at a segment's end: read on)."""
    plog = core.log_manager.get_log(topic, partition)
    out, offset = [], plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            break
        out += [decode_records(data, pos) for pos, _ in iter_batches(data)]
        offset = out[-1][0].last_offset + 1
    return out


def markers(core, topic="t", partition=0):
    """(offset, producer id, epoch, commit?) of each control batch in the partition."""
    return [(h.base_offset, h.producer_id, h.producer_epoch, marker_is_commit(records[0]))
            for h, records in batches(core, topic, partition) if h.is_control]


def aborted(core, topic="t", partition=0):
    return core.log_manager.get_log(topic, partition).aborted_txns.entries


def test_commit_writes_a_marker_to_every_partition_and_releases_the_lso(core):
    p = Producer(core)
    core.appender.append("t", 0, encode_batch([Record(0, 1000, None, b"plain")]))  # offset 0, not transactional
    first = p.send("t", 0, b"a", b"b")
    p.send("u", 1, b"c")
    assert first == 1
    assert lso(core) == 1 and lso(core, "u", 1) == 0  # held at each transaction's first offset
    assert lso(core, "t", 1) == 0 == core.log_manager.get_log("t", 1).log_end_offset
    assert p.end(commit=True) == E.NONE
    assert markers(core) == [(3, p.pid, p.epoch, True)]
    assert markers(core, "u", 1) == [(1, p.pid, p.epoch, True)]
    assert lso(core) == 4 == core.log_manager.get_log("t", 0).log_end_offset
    assert aborted(core) == []
    assert core.transactions.get("app").state is TxnState.COMPLETE_COMMIT
    assert p.end(commit=True) == E.NONE            # a retried EndTxn
    assert p.end(commit=False) == E.INVALID_TXN_STATE


def test_abort_indexes_the_aborted_range(core):
    p = Producer(core)
    first = p.send("t", 0, b"x")
    p.send("t", 0, b"y")
    assert p.end(commit=False) == E.NONE
    assert markers(core) == [(2, p.pid, p.epoch, False)]
    assert aborted(core) == [AbortedTxn(p.pid, first, 2)]
    # the next transaction of the same producer continues its sequence and is indexed on its own
    again = p.send("t", 0, b"z")
    assert p.end(commit=False) == E.NONE
    assert aborted(core) == [AbortedTxn(p.pid, 0, 2), AbortedTxn(p.pid, again, 4)]


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(core):
    zombie = Producer(core)
    zombie.send("t", 0, b"half")
    successor = Producer(core)
    assert (successor.pid, successor.epoch) == (zombie.pid, zombie.epoch + 1)
    assert markers(core) == [(1, zombie.pid, successor.epoch, False)]   # aborted with the new epoch
    assert lso(core) == 2
    assert zombie.end(commit=True) == E.PRODUCER_FENCED
    assert core.transactions.add_partitions("app", zombie.pid, zombie.epoch, [("t", 1)]) == E.PRODUCER_FENCED
    assert core.transactions.verify_produce("app", zombie.pid, zombie.epoch, ("t", 0)) == E.INVALID_PRODUCER_EPOCH
    assert core.transactions.get("app").state is TxnState.COMPLETE_ABORT


def test_recovery_with_the_current_epoch_bumps_it_and_a_stale_one_is_fenced(core):
    p = Producer(core)
    tx = core.transactions
    assert tx.init_producer_id("app", TIMEOUT_MS, p.pid, p.epoch) == (E.NONE, p.pid, p.epoch + 1)
    assert tx.init_producer_id("app", TIMEOUT_MS, p.pid, p.epoch) == (E.NONE, p.pid, p.epoch + 1)  # a retry
    assert tx.init_producer_id("app", TIMEOUT_MS, p.pid, p.epoch + 7)[0] == E.PRODUCER_FENCED
    assert tx.init_producer_id("app", TIMEOUT_MS, p.pid + 1, 0)[0] == E.PRODUCER_FENCED
    successor = Producer(core)                        # a new instance: the recovered one is a zombie now
    assert tx.init_producer_id("app", TIMEOUT_MS, p.pid, p.epoch + 1)[0] == E.PRODUCER_FENCED
    assert tx.get("app").producer_epoch == successor.epoch


def test_bad_requests_get_kafkas_error_codes_and_change_nothing(core):
    p = Producer(core)
    tx = core.transactions
    assert tx.init_producer_id("other", 0)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert tx.init_producer_id("other", 10**9)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert tx.add_partitions("nobody", 5, 0, [("t", 0)]) == E.INVALID_PRODUCER_ID_MAPPING
    assert tx.end_txn("app", p.pid, p.epoch, True) == E.INVALID_TXN_STATE     # nothing open
    assert tx.verify_produce("app", p.pid, p.epoch, ("t", 0)) == E.INVALID_TXN_STATE
    p.send("t", 0, b"v")
    assert tx.verify_produce("app", p.pid, p.epoch, ("t", 1)) == E.INVALID_TXN_STATE  # not added
    assert tx.txn_offset_commit("app", p.pid, p.epoch, "g", -1, "", None, {("t", 0): CommittedOffset(5)}) \
        == E.INVALID_TXN_STATE                                                     # no AddOffsetsToTxn first
    assert tx.get("app").state is TxnState.ONGOING and tx.get("app").partitions == {("t", 0)}
    assert p.end(commit=True) == E.NONE


def test_offsets_reach_the_group_only_at_commit_and_a_stale_generation_is_refused(core):
    p = Producer(core)
    tx = core.transactions
    assert tx.add_offsets("app", p.pid, p.epoch, "g") == E.NONE
    assert tx.txn_offset_commit("app", p.pid, p.epoch, "g", 3, "member-1", None,
                                {("t", 0): CommittedOffset(9)}) == E.UNKNOWN_MEMBER_ID   # no such member
    assert tx.txn_offset_commit("app", p.pid, p.epoch, "g", -1, "", None, {("t", 0): CommittedOffset(7)}) == 0
    assert core.groups.committed("g") == {}
    assert p.end(commit=True) == E.NONE
    assert core.groups.committed("g")[("t", 0)].offset == 7
    assert tx.add_offsets("app", p.pid, p.epoch, "g") == E.NONE
    assert tx.txn_offset_commit("app", p.pid, p.epoch, "g", -1, "", None, {("t", 0): CommittedOffset(8)}) == 0
    assert p.end(commit=False) == E.NONE
    assert core.groups.committed("g")[("t", 0)].offset == 7   # the aborted offset never arrived


def test_offsets_of_an_open_transaction_are_pending_until_it_ends(core):
    """What OffsetFetch with require_stable (KIP-447) answers UNSTABLE_OFFSET_COMMIT for."""
    p, tx = Producer(core), core.transactions
    assert tx.pending_offsets("g") == set()
    assert tx.add_offsets("app", p.pid, p.epoch, "g") == E.NONE
    assert tx.pending_offsets("g") == set()   # the group is in the transaction, no offset yet
    assert tx.txn_offset_commit("app", p.pid, p.epoch, "g", -1, "", None, {("t", 1): CommittedOffset(4)}) == 0
    assert tx.pending_offsets("g") == {("t", 1)} and tx.pending_offsets("other") == set()
    assert p.end(commit=False) == E.NONE
    assert tx.pending_offsets("g") == set()


def test_the_coordinator_aborts_a_transaction_past_its_timeout(core, clock):
    p = Producer(core)
    p.send("t", 0, b"abandoned")
    clock.advance(TIMEOUT_MS - 1)
    assert lso(core) == 0
    clock.advance(1)
    assert lso(core) == 2
    assert markers(core) == [(1, p.pid, p.epoch + 1, False)]
    assert aborted(core) == [AbortedTxn(p.pid, 0, 1)]
    assert p.end(commit=True) == E.PRODUCER_FENCED   # the producer that vanished cannot commit it later


def test_a_restart_finishes_a_prepared_commit_and_aborts_an_open_transaction(data_dir, clock):
    core = open_core(data_dir, clock)
    committing, open_one = Producer(core, "committing"), Producer(core, "open")
    committing.send("t", 0, b"decided")
    open_one.send("t", 1, b"undecided")
    committing.core.transactions.add_offsets("committing", committing.pid, committing.epoch, "g")
    core.transactions.txn_offset_commit("committing", committing.pid, committing.epoch, "g", -1, "", None,
                                          {("u", 0): CommittedOffset(42)})
    txn = core.transactions.get("committing")
    txn.state = TxnState.PREPARE_COMMIT            # the decision is durable; the broker dies before any marker
    core.transactions.store.store(txn)
    core.close()

    core = open_core(data_dir, clock)
    try:
        assert markers(core, "t", 0) == [(1, committing.pid, committing.epoch, True)]
        assert markers(core, "t", 1) == [(1, open_one.pid, open_one.epoch + 1, False)]
        assert aborted(core, "t", 1) == [AbortedTxn(open_one.pid, 0, 1)]
        assert lso(core, "t", 0) == 2 and lso(core, "t", 1) == 2
        assert core.groups.committed("g")[("u", 0)].offset == 42
        assert core.transactions.get("committing").state is TxnState.COMPLETE_COMMIT
        assert core.transactions.get("open").state is TxnState.COMPLETE_ABORT
        # an idempotent sequence survives the markers: the producer goes on after a new InitProducerId
        again = Producer(core, "committing")
        assert again.send("t", 0, b"next") == 2
        assert again.end(commit=True) == E.NONE
    finally:
        core.close()


def test_a_restart_aborts_every_open_transaction_of_a_partition_from_its_own_first_batch(data_dir, clock):
    core = open_core(data_dir, clock)
    a, b = Producer(core, "a"), Producer(core, "b")
    a.send("t", 0, b"a1")                          # 0: a's first transaction...
    assert a.end(commit=True) == E.NONE            # 1: ...committed
    b.send("t", 0, b"b1")                          # 2: b's transaction opens
    a.send("t", 0, b"a2")                          # 3: a's second one opens after its marker
    b.send("t", 0, b"b2")                          # 4
    core.close()

    core = open_core(data_dir, clock)
    try:
        first = {a.pid: 3, b.pid: 2}                # each from its own first batch, past a's marker
        ends = markers(core)[1:]                 # the two abort markers, in whichever order
        assert [(pid, commit) for _, pid, _, commit in ends] in ([(a.pid, False), (b.pid, False)],
                                                                 [(b.pid, False), (a.pid, False)])
        assert aborted(core) == [AbortedTxn(pid, first[pid], offset) for offset, pid, _, _ in ends]
        assert lso(core) == 7
    finally:
        core.close()


def test_the_cleaner_removes_aborted_records_and_leaves_open_transactions_alone(core):
    core.log_manager.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    plog = core.log_manager.get_log("c", 0)
    core.appender.append("c", 0, encode_batch([Record(0, 1000, b"k", b"committed")]))
    aborting, open_one = Producer(core, "aborting"), Producer(core, "open")

    def keyed(producer, key, value):
        assert core.transactions.add_partitions(producer.txn_id, producer.pid, producer.epoch, [("c", 0)]) == 0
        seq = producer.sequences.get(("c", 0), 0)
        producer.sequences[("c", 0)] = seq + 1
        batch = encode_batch([Record(0, 1000, key, value)], producer_id=producer.pid, producer_epoch=producer.epoch,
                             base_sequence=seq, attributes=ATTR_TRANSACTIONAL)
        assert core.appender.append("c", 0, batch).error == E.NONE

    keyed(aborting, b"k", b"aborted")
    keyed(open_one, b"j", b"pending")
    assert aborting.end(commit=False) == E.NONE
    plog.roll()

    def values():
        return [(r.key, r.value) for h, records in batches(core, "c") if not h.is_control for r in records]

    soon = int(time.time() * 1000) + 3600_000      # past min.compaction.lag.ms, within delete.retention.ms
    written = values()
    assert clean_log(plog, soon) is None                       # a transaction is open in the closed segment
    assert values() == written
    assert open_one.end(commit=True) == E.NONE
    plog.roll()
    stats = clean_log(plog, soon)
    assert stats is not None and stats.records_removed == 1     # the aborted record; its marker stays a while
    assert values() == [(b"k", b"committed"), (b"j", b"pending")]  # the aborted value never shadowed the committed
    assert [commit for _, _, _, commit in markers(core, "c")] == [False, True]
    assert len(plog.aborted_txns.entries) == 1
    # past delete.retention.ms the abort marker goes, with its index entry; the commit marker's records remain
    assert clean_log(plog, FAR_FUTURE_MS).records_removed == 1
    assert [(pid, commit) for _, pid, _, commit in markers(core, "c")] == [(open_one.pid, True)]
    assert plog.aborted_txns.entries == []


def test_end_txn_on_a_full_disk_decides_nothing_and_succeeds_once_there_is_room(tmp_path, clock):
    with small_disk(tmp_path / "disk", "1m") as disk:
        core = Core(disk / "data", clock, flush="always")
        core.log_manager.create_topic("t", 1)
        p = Producer(core)
        p.send("t", 0, b"v")
        core.log_manager.get_log("__transaction_state", 0).roll()   # its next write needs a page of its own
        filler = fill_up(disk)
        assert p.end(commit=True) == E.COORDINATOR_NOT_AVAILABLE      # the decision could not be written
        assert core.transactions.get("app").state is TxnState.ONGOING and lso(core) == 0
        filler.unlink()
        assert p.end(commit=True) == E.NONE                           # the client's retry
        assert markers(core) == [(1, p.pid, p.epoch, True)] and lso(core) == 2
        core.close()


def test_an_idle_transactional_id_expires_and_stays_forgotten_after_a_restart(data_dir, clock):
    core = open_core(data_dir, clock)
    idle, busy = Producer(core, "idle"), Producer(core, "busy")
    clock.advance(ID_EXPIRATION_MS - 1000)
    busy.send("t", 0, b"keeps it alive")
    assert busy.end(commit=True) == E.NONE
    clock.advance(1000)
    assert core.transactions.get("idle") is None and core.transactions.get("busy") is not None
    assert idle.end(commit=True) == E.INVALID_PRODUCER_ID_MAPPING   # the id is unknown now
    core.close()
    core = open_core(data_dir, clock)
    try:
        assert core.transactions.get("idle") is None and core.transactions.get("busy") is not None
    finally:
        core.close()
