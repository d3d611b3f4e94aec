"""Chapter: change data capture. The shop's SQLite database is the source of truth; its
customers, products and orders tables flow into topics as Debezium-shaped change events."""
from __future__ import annotations

import json
import random
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from rich.table import Table

from headwater.cdc.sqlite import CHANGELOG, SqliteConnector, install

TABLES = ["customers", "products", "orders"]
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, quantity INTEGER,
                     status TEXT NOT NULL);
"""


def _shop(path: Path, rng: random.Random) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                   [(i, f"customer-{i:03d}", rng.choice(["Lyon", "Oslo", "Pune"])) for i in range(50)])
    db.executemany("INSERT INTO products VALUES (?, ?, ?)", [(i, f"sku-{i:02d}", rng.randrange(199, 9999))
                                                             for i in range(20)])
    db.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, 'placed')",
                   [(i, rng.randrange(50), rng.randrange(20), rng.randint(1, 5)) for i in range(200)])
    return db


def _business(db: sqlite3.Connection, rng: random.Random) -> None:
    """A day at the shop: new orders, shipments, cancellations, price changes, in transactions."""
    for i in range(200, 500):
        db.execute("BEGIN")
        db.execute("INSERT INTO orders VALUES (?, ?, ?, ?, 'placed')", (i, rng.randrange(50), rng.randrange(20),
                                                                        rng.randint(1, 5)))
        if i % 3 == 0:
            db.execute("UPDATE orders SET status = 'shipped' WHERE id = ?", (rng.randrange(i),))
        if i % 15 == 0:
            db.execute("DELETE FROM orders WHERE id = ?", (rng.randrange(i),))
        if i % 60 == 0:
            db.execute("UPDATE products SET price_cents = price_cents + 100 WHERE id = ?", (rng.randrange(20),))
        db.execute("COMMIT")


def _read(bootstrap: str, topic: str) -> list:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-cdc", "enable.auto.commit": False})
    records = []
    for partition in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        consumer.assign([TopicPartition(topic, partition, low)])
        while low < high:
            for msg in consumer.consume(min(1000, high - low), 5.0):  # returns once that many arrived
                low = msg.offset() + 1
                records.append(msg)
    consumer.close()
    return records


def run(bootstrap: str, console) -> None:
    console.rule("[bold]Change data capture: the shop database as the source of truth")
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="headwater-shop-") as tmp:
        path = Path(tmp) / "shop.db"
        db = _shop(path, rng)
        install(db, TABLES)  # triggers on; today's rows enter the changelog as the snapshot
        stop = threading.Event()
        connector = SqliteConnector(str(path), TABLES, "shop", bootstrap, log=lambda _: None)
        thread = threading.Thread(target=connector.run, kwargs={"should_stop": stop.is_set}, daemon=True)
        thread.start()
        _business(db, rng)
        while thread.is_alive() and db.execute(f"SELECT count(*) FROM {CHANGELOG}").fetchone()[0]:
            time.sleep(0.1)  # rows leave the changelog once the broker acknowledged them
        stop.set()
        thread.join(30)
        source = {row[0]: row for row in db.execute("SELECT id, customer_id, product_id, quantity, status FROM orders")}
        db.close()

    table = Table(title="change events per topic (op: r snapshot, c create, u update, d delete)")
    for column in ("topic", "r", "c", "u", "d", "tombstones"):
        table.add_column(column, justify="right")
    replayed, sample = {}, None
    for name in TABLES:
        topic = f"shop.main.{name}"
        counts = dict.fromkeys(("r", "c", "u", "d", None), 0)
        for msg in _read(bootstrap, topic):
            event = json.loads(msg.value()) if msg.value() is not None else None
            counts[event["op"] if event else None] += 1
            if name == "orders" and event:
                after = event["after"]
                key = json.loads(msg.key())["id"]
                if event["op"] == "d":
                    replayed.pop(key, None)
                else:
                    replayed[key] = (after["id"], after["customer_id"], after["product_id"], after["quantity"],
                                     after["status"])
                    sample = event if event["op"] == "u" else sample
        table.add_row(topic, *(f"{counts[op]:,}" for op in ("r", "c", "u", "d", None)))
    console.print(table)
    console.print("an order shipped, as a consumer sees it:", json.dumps(sample))
    console.print(f"orders rebuilt from [bold]shop.main.orders[/] equal the source table: {replayed == source}")
