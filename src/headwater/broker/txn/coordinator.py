"""The transaction coordinator: KIP-98's state machine, one transactional id at a time.

InitProducerId gives a transactional id its producer id and bumps its epoch, which fences
every older instance of the same application (a zombie): their requests carry the old epoch
and are refused. A transaction opens when the producer adds its first partition (or group
offsets) and ends with EndTxn: the decision is written to ``__transaction_state`` first
(PrepareCommit / PrepareAbort), then a marker goes into every partition of the transaction
and, on commit, the offsets sent with it reach their groups; then the transaction is
Complete. A broker restarted between the two finishes what was decided, and aborts what was
still open. A transaction open longer than its timeout is aborted by the coordinator itself,
with an epoch bump, so the producer that vanished cannot add to it later.

The coordinator does no I/O of its own: it writes through the ``TransactionStore`` and the
partitions' marker writer, and keeps time with the ``Clock`` it is given.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from headwater.broker.clock import Clock
from headwater.broker.groups.coordinator import GroupCoordinator
from headwater.broker.groups.group import CommittedOffset
from headwater.protocol.errors import ErrorCode
from headwater.records.layout import NO_PRODUCER_ID

from .partitions import TxnPartitions
from .store import TransactionStore
from .transaction import (IDLE, CompleteAbort, CompleteCommit, Empty, Ongoing, PrepareAbort, PrepareCommit,
                          TopicPartition, Transaction)

log = logging.getLogger("headwater.txn")

MAX_TIMEOUT_MS = 900_000       # transaction.max.timeout.ms, Kafka's default
ID_EXPIRATION_MS = 7 * 24 * 3600 * 1000   # transactional.id.expiration.ms: an id idle this long is forgotten
MAX_EPOCH = 32766              # past it the producer gets a fresh producer id (Short.MaxValue - 1)
UNFINISHED = (Ongoing, PrepareCommit, PrepareAbort)   # what a restart must finish or abort


class TransactionCoordinator:
    def __init__(self, store: TransactionStore, clock: Clock, partitions: TxnPartitions,
                 allocate_producer_id: Callable[[], int], groups: GroupCoordinator):
        self.store, self.clock, self.partitions = store, clock, partitions
        self._allocate, self._groups = allocate_producer_id, groups
        self.completed = {True: 0, False: 0}   # transactions committed (True) and aborted since the start
        self._txns: dict[str, Transaction] = store.load()
        self._recover_open_partitions()
        for txn in list(self._txns.values()):
            self._recover(txn)
            if txn.state in IDLE:
                self._arm_expiry(txn)
        log.info("loaded %d transactional id(s) from __transaction_state", len(self._txns))

    def _recover_open_partitions(self) -> None:
        """At start: where each unfinished transaction begins in each of its partitions."""
        unfinished: dict[TopicPartition, set[int]] = {}
        for txn in self._txns.values():
            if txn.state in UNFINISHED:
                for topic_partition in txn.partitions:
                    unfinished.setdefault(topic_partition, set()).add(txn.producer_id)
        for (topic, partition), producer_ids in unfinished.items():
            self.partitions.recover_open(topic, partition, producer_ids)

    def _recover(self, txn: Transaction) -> None:
        """At start: finish a decided transaction, abort an open one (fencing its producer)."""
        if txn.state not in UNFINISHED:
            return
        if txn.state is PrepareCommit:
            self._write_markers(txn, commit=True)
        else:
            if txn.state is Ongoing:
                self._bump(txn)
                txn.transition(PrepareAbort)
            self._write_markers(txn, commit=False)
        log.info("transaction %r: %s completed after a restart", txn.transactional_id, txn.state.value)

    # --- InitProducerId --------------------------------------------------------------------

    def init_producer_id(self, txn_id: str, timeout_ms: int, producer_id: int = NO_PRODUCER_ID,
                         producer_epoch: int = -1) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch): a new epoch for the transactional id, fencing older ones; a
        transaction still open is aborted first. With the producer's current id and epoch (KIP-360)
        only that producer may bump."""
        if not txn_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
            return ErrorCode.INVALID_TRANSACTION_TIMEOUT, -1, -1
        txn = self._txns.get(txn_id)
        if txn is None:
            txn = Transaction(txn_id, self._allocate(), 0, timeout_ms, update_ms=self.clock.now_ms())
            error = self.store.store(txn)
            if error:
                return error, -1, -1
            self._txns[txn_id] = txn
            self._arm_expiry(txn)
            return ErrorCode.NONE, txn.producer_id, txn.producer_epoch
        if producer_id != NO_PRODUCER_ID and (producer_id != txn.producer_id
                                              or producer_epoch not in (txn.producer_epoch, txn.last_epoch)):
            return ErrorCode.PRODUCER_FENCED, -1, -1
        if txn.state in (PrepareCommit, PrepareAbort) and self._finish(txn):
            return ErrorCode.CONCURRENT_TRANSACTIONS, -1, -1
        if producer_id != NO_PRODUCER_ID and producer_epoch == txn.last_epoch and txn.state in IDLE:
            return ErrorCode.NONE, txn.producer_id, txn.producer_epoch  # a retry of the bump it already got
        txn.timeout_ms = timeout_ms
        self._bump(txn, recovery=producer_id != NO_PRODUCER_ID)
        if txn.state is Ongoing:
            error = self._end(txn, commit=False)
        else:
            txn.transition(Empty)
            txn.update_ms = self.clock.now_ms()
            error = self.store.store(txn)
            self._arm_expiry(txn)
        if error:
            return error, -1, -1
        log.info("transaction %r: producer %d epoch %d", txn_id, txn.producer_id, txn.producer_epoch)
        return ErrorCode.NONE, txn.producer_id, txn.producer_epoch

    def _bump(self, txn: Transaction, recovery: bool = False) -> None:
        txn.bump_epoch(self._allocate() if txn.producer_epoch >= MAX_EPOCH else None, recovery)

    # --- the transaction's content ---------------------------------------------------------

    def _producer(self, txn_id: str, producer_id: int, producer_epoch: int) -> Transaction | ErrorCode:
        """The transaction of this producer, or the error that refuses it, in Kafka's order."""
        txn = self._txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != txn.producer_epoch:
            return ErrorCode.PRODUCER_FENCED
        if txn.state in (PrepareCommit, PrepareAbort) and self._finish(txn):
            return ErrorCode.CONCURRENT_TRANSACTIONS
        return txn

    def _finish(self, txn: Transaction) -> ErrorCode:
        """Try again the markers a decided transaction could not write yet."""
        return self._write_markers(txn, commit=txn.state is PrepareCommit)

    def add_partitions(self, txn_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition]) -> ErrorCode:
        txn = self._producer(txn_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        added = set(partitions) - txn.partitions
        if not added and txn.state is Ongoing:
            return ErrorCode.NONE
        return self._extend(txn, lambda: txn.partitions.update(added), lambda: txn.partitions.difference_update(added))

    def add_offsets(self, txn_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        txn = self._producer(txn_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        if group_id in txn.offsets and txn.state is Ongoing:
            return ErrorCode.NONE
        return self._extend(txn, lambda: txn.offsets.setdefault(group_id, {}), lambda: txn.offsets.pop(group_id, None))

    def _extend(self, txn: Transaction, change: Callable[[], object], undo: Callable[[], object]) -> ErrorCode:
        """Add to the transaction (opening it if none is open), durably; undone if the write fails."""
        opening = txn.state is not Ongoing
        if opening:
            txn.partitions.clear()
            txn.offsets.clear()
            txn.start_ms = self.clock.now_ms()
        previous = txn.state
        txn.transition(Ongoing)
        change()
        txn.update_ms = self.clock.now_ms()
        error = self.store.store(txn)
        if error:
            undo()
            txn.state = previous
            return error
        if opening:
            self._set_timer(txn, txn.timeout_ms, self._expire, txn, txn.producer_epoch, txn.start_ms)
        return ErrorCode.NONE

    def txn_offset_commit(self, txn_id: str, producer_id: int, producer_epoch: int, group_id: str,
                          generation: int, member_id: str, instance_id: str | None,
                          offsets: dict[TopicPartition, CommittedOffset]) -> ErrorCode:
        """Offsets that reach the group when the transaction commits (KIP-447: a member of a
        generation the group has left behind is refused)."""
        txn = self._producer(txn_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state is not Ongoing or group_id not in txn.offsets:
            return ErrorCode.INVALID_TXN_STATE  # AddOffsetsToTxn first
        error = self._groups.check_transactional_member(group_id, generation, member_id, instance_id)
        if error:
            return error
        txn.offsets[group_id].update(offsets)
        txn.update_ms = self.clock.now_ms()
        return self.store.store(txn)

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """The partitions whose offsets for ``group_id`` an unfinished transaction holds: an
        OffsetFetch with require_stable answers them UNSTABLE_OFFSET_COMMIT (KIP-447)."""
        return {tp for txn in self._txns.values() if txn.state in UNFINISHED for tp in txn.offsets.get(group_id, ())}

    def verify_produce(self, txn_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition) -> ErrorCode:
        """May this producer write transactional batches to ``tp`` now?"""
        txn = self._txns.get(txn_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != txn.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if txn.state is not Ongoing or tp not in txn.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # --- EndTxn ----------------------------------------------------------------------------

    def end_txn(self, txn_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        txn = self._producer(txn_id, producer_id, producer_epoch)
        if isinstance(txn, ErrorCode):
            return txn
        if txn.state is Ongoing:
            return self._end(txn, commit)
        if txn.state is (CompleteCommit if commit else CompleteAbort):
            return ErrorCode.NONE  # a retry of the EndTxn that completed it
        return ErrorCode.INVALID_TXN_STATE

    def _end(self, txn: Transaction, commit: bool) -> ErrorCode:
        self._set_timer(txn, None)
        txn.transition(PrepareCommit if commit else PrepareAbort)
        txn.update_ms = self.clock.now_ms()
        error = self.store.store(txn)
        if error:  # nothing decided: the producer may retry
            txn.state = Ongoing
            return error
        return self._write_markers(txn, commit)

    def _write_markers(self, txn: Transaction, commit: bool) -> ErrorCode:
        """Carry out a decision that is already durable. A partition whose log refuses its marker
        keeps the transaction in its Prepare state (the client retries; so does a restart)."""
        unmarked = {(topic, partition) for topic, partition in sorted(txn.partitions)
                    if not self.partitions.write_marker(topic, partition, txn.producer_id, txn.producer_epoch, commit)}
        if unmarked:
            txn.partitions = unmarked
            self.store.store(txn)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if commit:
            for group_id, offsets in txn.offsets.items():
                if offsets:
                    self._groups.commit_transactional(group_id, offsets)
        txn.transition(CompleteCommit if commit else CompleteAbort)
        self.completed[commit] += 1
        txn.partitions, txn.offsets = set(), {}
        txn.update_ms = self.clock.now_ms()
        log.info("transaction %r: %s", txn.transactional_id, txn.state.value)
        self._arm_expiry(txn)
        return self.store.store(txn)

    def _expire(self, txn: Transaction, epoch: int, start_ms: int) -> None:
        if txn.state is not Ongoing or txn.producer_epoch != epoch or txn.start_ms != start_ms:
            return
        log.info("transaction %r: aborted after its timeout of %d ms", txn.transactional_id, txn.timeout_ms)
        self._bump(txn)  # the producer that let it time out is fenced
        self._end(txn, commit=False)

    # --- timers: a transaction's timeout while it is open, its id's expiry while idle --------

    def _set_timer(self, txn: Transaction, delay_ms: int | None, *callback) -> None:
        if txn.timer is not None:
            txn.timer.cancel()
        txn.timer = self.clock.after(delay_ms, *callback) if delay_ms is not None else None

    def _arm_expiry(self, txn: Transaction) -> None:
        delay = max(0, txn.update_ms + ID_EXPIRATION_MS - self.clock.now_ms())
        self._set_timer(txn, delay, self._forget, txn, txn.update_ms)

    def _forget(self, txn: Transaction, update_ms: int) -> None:
        """An id idle for transactional.id.expiration.ms is dropped (a tombstone), as Kafka does:
        frameworks that make a new id per process would otherwise pile them up for ever."""
        if txn.state not in IDLE or txn.update_ms != update_ms or self._txns.get(txn.transactional_id) is not txn:
            return
        if not self.store.forget(txn.transactional_id):
            del self._txns[txn.transactional_id]
            log.info("transactional id %r expired after %d ms idle", txn.transactional_id, ID_EXPIRATION_MS)

    # --- administration --------------------------------------------------------------------

    def transactions(self) -> list[Transaction]:
        return list(self._txns.values())

    def get(self, txn_id: str) -> Transaction | None:
        return self._txns.get(txn_id)
