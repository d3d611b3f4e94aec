"""A consume-transform-produce processor with exactly-once output (DDIA ch. 11, "atomic
commit revisited"): payments in, ledger entries out, with confluent-kafka transactions.

Each poll's worth of payments becomes one transaction holding the ledger entries AND the
consumer's offsets (``send_offsets_to_transaction``): both take effect or neither does. Kill
the process at any point and start it again: the new instance, with the same
``transactional.id``, fences the old one and aborts what it left open; its consumer resumes
from the offsets of the last committed transaction, so every payment is turned into exactly
one ledger entry that a read_committed reader sees.

Run as ``python -m headwater.demo.payments_processor BOOTSTRAP`` (the demo and the tests kill
it with SIGKILL); it exits once ``--idle-exit`` seconds pass without input.
"""
from __future__ import annotations

import argparse
import json
import time

from confluent_kafka import Consumer, KafkaException, Producer

PAYMENTS, LEDGER = "payment-requests", "ledger"  # "payments" is the Spark chapter's
GROUP, TRANSACTIONAL_ID = "payments-processor", "payments-processor"


def ledger_entry(payment: dict) -> dict:
    """The transformation: a payment becomes a debit of its account, in cents."""
    return {"payment": payment["id"], "account": payment["account"], "debit_cents": round(payment["amount"] * 100)}


def run(bootstrap: str, batch: int, pause: float, idle_exit: float) -> None:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                         # static membership: a restarted instance takes its place at once, no rebalance wait
                         "group.instance.id": "payments-processor-0", "session.timeout.ms": 10000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": TRANSACTIONAL_ID, "linger.ms": 5})
    producer.init_transactions(60)
    consumer.subscribe([PAYMENTS])
    idle_since = time.monotonic()
    try:
        while time.monotonic() - idle_since < idle_exit:
            messages = [m for m in consumer.consume(batch, 0.5) if not m.error()]
            if not messages:
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            for msg in messages:
                entry = ledger_entry(json.loads(msg.value()))
                producer.produce(LEDGER, key=entry["account"].encode(), value=json.dumps(entry).encode())
            time.sleep(pause)   # the transaction stays open a while: a kill lands mid-transaction
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
    except KafkaException as exc:  # fenced or a lost broker: exit, the supervisor starts a new instance
        raise SystemExit(f"payments processor stops: {exc}") from None
    finally:
        consumer.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("bootstrap")
    parser.add_argument("--batch", type=int, default=50, help="payments per transaction at most")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds each transaction stays open")
    parser.add_argument("--idle-exit", type=float, default=5.0, help="exit after this many idle seconds")
    args = parser.parse_args()
    run(args.bootstrap, args.batch, args.pause, args.idle_exit)


if __name__ == "__main__":
    main()
