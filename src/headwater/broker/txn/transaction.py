"""One transactional id's state, and the diagram its state moves on (Kafka's TransactionState)."""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from headwater.broker.clock import Timer
from headwater.broker.groups.group import CommittedOffset


class TxnState(Enum):
    EMPTY = "Empty"                  # a producer id, no transaction open
    ONGOING = "Ongoing"              # partitions or offsets added: a transaction is open
    PREPARE_COMMIT = "PrepareCommit" # decided (and durable): markers being written
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort = TxnState

TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    Empty: frozenset({Empty, Ongoing, PrepareAbort}),
    Ongoing: frozenset({Ongoing, PrepareCommit, PrepareAbort}),
    PrepareCommit: frozenset({CompleteCommit}),
    PrepareAbort: frozenset({CompleteAbort}),
    CompleteCommit: frozenset({Empty, Ongoing, PrepareAbort}),
    CompleteAbort: frozenset({Empty, Ongoing, PrepareAbort}),
}
# No transaction open: the producer may begin one (or bump its epoch).
IDLE = frozenset({Empty, CompleteCommit, CompleteAbort})


class IllegalTransition(Exception):
    pass


TopicPartition = tuple[str, int]


@dataclass
class Transaction:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = Empty
    last_epoch: int = -1                        # the epoch a KIP-360 recovery bumped from (its retry is answered again)
    partitions: set[TopicPartition] = field(default_factory=set)
    # Offsets sent with the transaction, per group: they reach the group only at commit.
    offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    start_ms: int = -1
    update_ms: int = -1
    timer: Timer | None = field(default=None, repr=False, compare=False)

    def transition(self, to: TxnState) -> None:
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"transaction {self.transactional_id}: {self.state.value} -> {to.value}")
        self.state = to

    def bump_epoch(self, new_producer_id: int | None = None, recovery: bool = False) -> None:
        """Fence every holder of the current epoch; a fresh producer id when the epoch runs out.
        ``recovery``: the holder itself asked (KIP-360), so it may retry with the epoch it had."""
        self.last_epoch = self.producer_epoch if recovery else -1
        if new_producer_id is not None:
            self.producer_id, self.producer_epoch, self.last_epoch = new_producer_id, 0, -1
        else:
            self.producer_epoch += 1
