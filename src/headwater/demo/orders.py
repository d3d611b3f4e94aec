"""Chapter 1, the partitioned log: order events keyed by customer land in partitions and come back in order."""
from __future__ import annotations

import json
import random

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.table import Table

TOPIC, PARTITIONS, ORDERS = "orders", 6, 5000


def order_events(n: int, seed: int = 11):
    rng = random.Random(seed)
    for i in range(n):
        customer = f"customer-{rng.randrange(200):03d}"
        yield customer, {"order_id": i, "customer": customer, "product": f"sku-{rng.randrange(50):02d}",
                         "quantity": rng.randint(1, 5), "price_cents": rng.randrange(199, 9999)}


def run(bootstrap: str, console) -> None:
    console.rule("[bold]1. A partitioned log: orders")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS)])[TOPIC].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "compression.type": "lz4"})
    for customer, order in order_events(ORDERS):
        producer.produce(TOPIC, key=customer, value=json.dumps(order))
        producer.poll(0)
    producer.flush(30)
    console.print(f"produced {ORDERS:,} order events keyed by customer to [bold]{TOPIC}[/] ({PARTITIONS} partitions)")

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-reader", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    stats = {p: {"events": 0, "first": None, "last": None, "bytes": 0, "customers": set()} for p in range(PARTITIONS)}
    seen = 0
    while seen < ORDERS:
        for msg in consumer.consume(1000, 5.0):
            s = stats[msg.partition()]
            s["events"] += 1
            s["first"] = msg.offset() if s["first"] is None else s["first"]
            s["last"] = msg.offset()
            s["bytes"] += len(msg.value()) + len(msg.key())
            s["customers"].add(msg.key())
            seen += 1
    consumer.close()

    table = Table(title=f"{TOPIC}: consumed back from every partition")
    for column in ("partition", "events", "first offset", "last offset", "bytes", "customers"):
        table.add_column(column, justify="right")
    for p, s in stats.items():
        table.add_row(str(p), f"{s['events']:,}", str(s["first"]), str(s["last"]), f"{s['bytes']:,}",
                      str(len(s["customers"])))
    console.print(table)
    owners = {}
    for p, s in stats.items():
        for customer in s["customers"]:
            owners.setdefault(customer, set()).add(p)
    console.print(f"every customer's orders sit in exactly one partition: "
                  f"{all(len(ps) == 1 for ps in owners.values())}")
