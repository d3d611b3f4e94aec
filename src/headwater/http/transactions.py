"""Transactions as the console and /metrics show them: every transactional id the coordinator
knows (producer id and epoch, state, the partitions of its open transaction, how long it has
been open), the transactions completed since the broker started, and each partition's last
stable offset, up to which read_committed consumers read. All read at request time."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from headwater.broker.broker import Broker
from headwater.broker.txn.transaction import IDLE, TxnState


@dataclass(frozen=True)
class TransactionView:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str
    timeout_ms: int
    partitions: list[tuple[str, int]]   # of the open transaction
    open_ms: int | None                 # how long the transaction has been open; None when none is
    updated_ms: int                     # Unix ms of the last change


@dataclass(frozen=True)
class HeldBack:
    """A partition whose last stable offset is below its log end: an open transaction holds it back."""
    topic: str
    partition: int
    last_stable: int
    log_end: int


def transactions(broker: Broker) -> list[TransactionView]:
    now = broker.transactions.clock.now_ms()
    return [TransactionView(t.transactional_id, t.producer_id, t.producer_epoch, t.state.value, t.timeout_ms,
                            sorted(t.partitions), None if t.state in IDLE or t.start_ms < 0 else now - t.start_ms,
                            t.update_ms)
            for t in sorted(broker.transactions.transactions(), key=lambda t: t.transactional_id)]


def last_stable_offsets(broker: Broker) -> Iterator[tuple[str, int, int, int]]:
    """(topic, partition, last stable offset, log end) of every partition."""
    for topic in list(broker.log_manager.topics.values()):
        for index, plog in enumerate(topic.partitions):
            yield topic.name, index, broker.txn_partitions.last_stable_offset(topic.name, index, plog), \
                plog.log_end_offset


def held_back(broker: Broker) -> list[HeldBack]:
    return [HeldBack(*row) for row in sorted(last_stable_offsets(broker)) if row[2] < row[3]]


class TransactionCollector(Collector):
    """Transaction metrics: open transactions, ids per state, completions, LSO per partition."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        coordinator = self.broker.transactions
        views = transactions(self.broker)
        yield GaugeMetricFamily("kafka_transactions_open", "Transactions open (Ongoing, PrepareCommit, PrepareAbort)",
                                value=sum(1 for v in views if v.open_ms is not None))
        ids = GaugeMetricFamily("kafka_transactional_ids", "Transactional ids per state", labels=["state"])
        for state in TxnState:
            ids.add_metric([state.value], sum(1 for v in views if v.state == state.value))
        yield ids
        yield CounterMetricFamily("kafka_transactions_committed", "Transactions committed since the broker started",
                                  value=coordinator.completed[True])
        yield CounterMetricFamily("kafka_transactions_aborted",
                                  "Transactions aborted since the broker started (by the producer or its timeout)",
                                  value=coordinator.completed[False])
        stable = GaugeMetricFamily("kafka_topic_partition_last_stable_offset",
                                   "Last stable offset: read_committed consumers read up to it",
                                   labels=["topic", "partition"])
        for topic, partition, last_stable, _ in last_stable_offsets(self.broker):
            stable.add_metric([topic, str(partition)], last_stable)
        yield stable
