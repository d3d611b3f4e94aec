"""Chapter: exactly-once payments. A processor turns payments into ledger entries with
confluent-kafka transactions (consume-transform-produce); it is killed in the middle of a
transaction, whose entries are already in the log. A read_committed reader never sees them;
a new instance fences the dead one, and the final ledger equals plain Python's, to the cent.
"""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from collections import Counter

from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from rich.table import Table

from headwater.demo.checks import CheckFailed
from headwater.demo.payments_processor import LEDGER, PAYMENTS, TRANSACTIONAL_ID, ledger_entry

PAYMENT_COUNT = 600
ACCOUNTS = 8


def read_to_end(bootstrap: str, topic: str, isolation: str, timeout: float = 60) -> list[bytes]:
    """Every value of every partition of ``topic`` up to its end, as a consumer with
    ``isolation.level=isolation`` reads it (read_committed stops at the last stable offset)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "headwater-demo-reader",
                         "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False})
    partitions = list(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    values, at_end, deadline = [], set(), time.monotonic() + timeout
    try:
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise CheckFailed(f"{topic}: a consumer did not reach the end of every partition in {timeout} s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            values.append(msg.value())
    finally:
        consumer.close()
    return values


def payments(n: int = PAYMENT_COUNT) -> list[dict]:
    rng = random.Random(2026)
    return [{"id": i, "account": f"acct-{rng.randrange(ACCOUNTS)}", "amount": rng.randrange(1, 100_000) / 100}
            for i in range(n)]


def ledger(entries) -> Counter:
    """Debits per account, in cents."""
    totals = Counter()
    for entry in entries:
        totals[entry["account"]] += entry["debit_cents"]
    return totals


def _processor(bootstrap: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "headwater.demo.payments_processor", bootstrap,
                             "--batch", "20", "--pause", "0.3", "--idle-exit", "3"])


def _open_transaction(admin: KafkaAdminClient) -> bool:
    """Whether the processor's transaction is open with partitions added, as the broker says."""
    described = admin.describe_transactions([TRANSACTIONAL_ID])[TRANSACTIONAL_ID]
    return described.state.value == "Ongoing" and bool(described.topic_partitions)


def _kill_mid_transaction(bootstrap: str, attempts: int = 5) -> tuple[int, int]:
    """Start the processor and SIGKILL it while its transaction is open and has written entries
    (asked of the broker with DescribeTransactions); (committed, written) ledger entries after."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="headwater-demo")
    try:
        for _ in range(attempts):
            proc = _processor(bootstrap)
            time.sleep(2)    # a few transactions commit first
            deadline = time.monotonic() + 30
            while not _open_transaction(admin) and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.1)  # its entries reach the log (linger.ms=5); the commit comes 0.3 s after them
            proc.kill()
            proc.wait()
            committed = len(read_to_end(bootstrap, LEDGER, "read_committed"))
            written = len(read_to_end(bootstrap, LEDGER, "read_uncommitted"))
            if committed < written:
                return committed, written
    finally:
        admin.close()
    raise CheckFailed("the payments processor was never caught with a transaction open and entries written")


def run(bootstrap: str, console) -> None:
    console.rule("[bold]Exactly-once payments: consume-transform-produce with transactions")
    sent = payments()
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for payment in sent:
        producer.produce(PAYMENTS, key=payment["account"], value=json.dumps(payment))
    producer.flush(30)
    console.print(f"{len(sent)} payments written to [bold]{PAYMENTS}[/]; the processor turns each into a ledger "
                  f"entry in [bold]{LEDGER}[/], 20 per transaction, its input offsets committed inside it")
    committed, written = _kill_mid_transaction(bootstrap)
    console.print(f"processor [bold red]killed[/] (SIGKILL) mid-transaction: {written} entries in the log, "
                  f"{committed} committed; a read_committed reader sees {committed}, never the {written - committed} "
                  "of the open transaction")
    restarted = _processor(bootstrap)
    if restarted.wait(180) != 0:
        raise CheckFailed(f"the restarted processor exited with status {restarted.returncode}")
    entries = [json.loads(v) for v in read_to_end(bootstrap, LEDGER, "read_committed")]
    expected = ledger(ledger_entry(p) for p in sent)
    got = ledger(entries)
    table = Table(title="ledger: debits per account (cents)")
    for column in ("account", "plain Python", "read_committed ledger"):
        table.add_column(column, justify="right")
    for account in sorted(expected):
        table.add_row(account, f"{expected[account]:,}", f"{got[account]:,}")
    console.print(table)
    once = sorted(e["payment"] for e in entries) == list(range(len(sent)))
    console.print(f"a new instance fenced the dead one and finished: every payment in the ledger exactly once: {once}")
    if got != expected or not once:
        raise CheckFailed("the read_committed ledger differs from plain Python's")
