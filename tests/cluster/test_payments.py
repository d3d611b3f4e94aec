"""The transactional payments processor (consume, transform, produce and commit offsets in one
Kafka transaction) on Apache Kafka: the processor SIGKILLed mid-transaction twice and the node
leading the payments' first partition killed while it runs; the ledger a read_committed reader
sees equals plain Python's transformation of every payment, each exactly once."""
import json
import random
import subprocess
import time

from confluent_kafka import Producer

from headwater.demo.payments import read_to_end
from headwater.demo.payments_processor import LEDGER, PAYMENTS, ledger_entry

from ..integration.test_transactions_eos import payments, processor
from .conftest import leader_of

PAYMENT_COUNT = 400


def test_ledger_exactly_once_across_processor_and_node_kills(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap
    sent = payments(PAYMENT_COUNT)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for payment in sent:
        producer.produce(PAYMENTS, key=payment["account"].encode(), value=json.dumps(payment).encode())
    assert producer.flush(60) == 0

    rng = random.Random(13)
    for round_ in range(2):
        proc = processor(bootstrap)
        time.sleep(rng.uniform(2.5, 3.5))   # long enough to commit some transactions
        if round_ == 1:   # a Kafka node crashes too, with a transaction open
            with kafka_cluster.node_down(leader_of(bootstrap, PAYMENTS)):
                time.sleep(3)
            time.sleep(1)
        proc.kill()   # inside a transaction
        proc.wait()
    final = processor(bootstrap)
    try:
        final.wait(180)   # it exits once idle
    except subprocess.TimeoutExpired:
        final.kill()
    ledger = [json.loads(v) for v in read_to_end(bootstrap, LEDGER, "read_committed")]
    assert sorted(ledger, key=lambda e: e["payment"]) == [ledger_entry(p) for p in sent]
