"""Transaction state, kept in the compacted internal topic ``__transaction_state``.

One record per change of a transactional id's state, keyed by the id, so compaction keeps
the latest::

    key   {"transactional_id": T}
    value {"producer_id", "producer_epoch", "last_epoch", "timeout_ms", "state",
           "partitions": [[topic, partition]...],
           "offsets": {group: [[topic, partition, offset, leader_epoch, metadata]...]},
           "start_ms", "update_ms"}

A null value (tombstone) forgets an id that stayed idle for transactional.id.expiration.ms.
The coordinator writes the decision (PrepareCommit / PrepareAbort) before any marker, so a
broker that restarts between the two finishes what was decided.
"""
from __future__ import annotations

from headwater.broker.groups.group import CommittedOffset
from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.internal_topic import InternalTopic, json_bytes
from headwater.protocol.errors import ErrorCode

from .transaction import Transaction, TxnState

TRANSACTION_STATE_TOPIC = "__transaction_state"


def _key(transactional_id: str) -> bytes:
    return json_bytes({"transactional_id": transactional_id})


def _value(txn: Transaction) -> bytes:
    return json_bytes({
        "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch, "last_epoch": txn.last_epoch,
        "timeout_ms": txn.timeout_ms, "state": txn.state.value, "partitions": sorted(txn.partitions),
        "offsets": {group: [[t, p, c.offset, c.leader_epoch, c.metadata] for (t, p), c in offsets.items()]
                    for group, offsets in txn.offsets.items()},
        "start_ms": txn.start_ms, "update_ms": txn.update_ms})


def _restore(transactional_id: str, v: dict) -> Transaction:
    return Transaction(
        transactional_id, int(v["producer_id"]), int(v["producer_epoch"]), int(v["timeout_ms"]),
        TxnState(v["state"]), int(v["last_epoch"]), {(t, int(p)) for t, p in v["partitions"]},
        {group: {(t, int(p)): CommittedOffset(int(o), int(e), m) for t, p, o, e, m in offsets}
         for group, offsets in v["offsets"].items()},
        int(v["start_ms"]), int(v["update_ms"]))


class TransactionStore:
    def __init__(self, appender: Appender, clock: Clock):
        self._topic = InternalTopic(TRANSACTION_STATE_TOPIC, appender, clock)

    def store(self, txn: Transaction) -> ErrorCode:
        return self._topic.write([(_key(txn.transactional_id), _value(txn))])

    def forget(self, transactional_id: str) -> ErrorCode:
        return self._topic.write([(_key(transactional_id), None)])

    def load(self) -> dict[str, Transaction]:
        txns: dict[str, Transaction] = {}

        def apply(key: dict, value: dict | None) -> None:
            txn_id = key["transactional_id"]
            if value is None:
                txns.pop(txn_id, None)
            else:
                txns[txn_id] = _restore(txn_id, value)
        self._topic.replay(apply)
        return txns
