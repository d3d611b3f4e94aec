"""A known transactional workload for the console and /metrics tests: two committed
transactions, an aborted one, a producer fenced by a second instance of its transactional
id, and one transaction left open on partition 0, which holds back that partition's last
stable offset. The ground truth is what the clients saw."""
from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TOPIC = "ledger"
COMMITS, ABORTS, OPEN = "ledger-commits", "ledger-aborts", "ledger-open"


@dataclass
class Workload:
    open_producer: Producer   # its transaction is still open: abort it when done
    last_stable: int          # log end of partition 0 before the open transaction's first record
    log_end: int              # log end of partition 0 now


def _transactional(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 0})
    producer.init_transactions(30)
    return producer


def _log_end(bootstrap: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-workload-watermarks",
                         "isolation.level": "read_uncommitted"})   # the log end, not the last stable offset
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=30)[1]
    finally:
        consumer.close()


def run(bootstrap: str) -> Workload:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
    committer = _transactional(bootstrap, COMMITS)
    for n in range(2):
        committer.begin_transaction()
        for i in range(3):
            committer.produce(TOPIC, value=f"commit-{n}-{i}".encode(), partition=i % 2)
        committer.commit_transaction(30)
    _transactional(bootstrap, COMMITS)        # a second instance: epoch 1, the first is fenced
    aborter = _transactional(bootstrap, ABORTS)
    aborter.begin_transaction()
    aborter.produce(TOPIC, value=b"aborted", partition=1)
    aborter.flush(30)
    aborter.abort_transaction(30)
    last_stable = _log_end(bootstrap)
    holder = _transactional(bootstrap, OPEN)
    holder.begin_transaction()
    holder.produce(TOPIC, value=b"open", partition=0)
    holder.flush(30)
    return Workload(holder, last_stable, _log_end(bootstrap))
