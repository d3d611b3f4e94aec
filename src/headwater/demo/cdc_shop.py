"""Chapter: change data capture. The shop's database is the source of truth; its customers,
products and orders tables flow into topics as Debezium-shaped change events.

SQLite (a temporary file) by default; PostgreSQL when HEADWATER_DEMO_DSN names a database
with wal_level=logical (the demo works in a schema `headwater_shop` it re-creates there).
"""
from __future__ import annotations

import json
import os
import random
import sqlite3
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from rich.table import Table

from headwater.cdc import sqlite as cdc_sqlite

TABLES = ["customers", "products", "orders"]
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, product_id INTEGER, quantity INTEGER,
                     status TEXT NOT NULL);
"""


class SqliteShop:
    schema = "main"

    def __init__(self, directory: str):
        self.path = str(Path(directory) / "shop.db")
        self.db = sqlite3.connect(self.path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.executescript(SCHEMA)

    def execute(self, statement, params=()):
        return self.db.execute(statement, params).fetchall()

    def executemany(self, statement, rows):
        self.db.executemany(statement, rows)

    def start_capture(self, bootstrap):
        cdc_sqlite.install(self.db, TABLES)  # triggers on; today's rows enter the changelog as the snapshot
        return cdc_sqlite.SqliteConnector(self.path, TABLES, "shop", bootstrap, log=lambda _: None)

    def streaming(self):
        return True  # the snapshot went into the changelog with the triggers

    def captured(self):
        # rows leave the changelog once the broker acknowledged them
        return self.execute(f"SELECT count(*) FROM {cdc_sqlite.CHANGELOG}") == [(0,)]

    def close(self):
        self.db.close()


SLOT_RELEASE_S = 30   # how long close() waits for the server to release the demo's slot


class PostgresShop:
    schema = "headwater_shop"

    def __init__(self, dsn: str):
        import psycopg2

        self.dsn = dsn
        self.db = psycopg2.connect(dsn)
        self.db.autocommit = True
        self.cur = self.db.cursor()
        self._drop_slot()
        self.cur.execute("DROP SCHEMA IF EXISTS headwater_shop CASCADE; CREATE SCHEMA headwater_shop; "
                         "SET search_path TO headwater_shop; " + SCHEMA)

    def execute(self, statement, params=()):
        self.cur.execute(statement.replace("?", "%s"), params)
        return self.cur.fetchall() if self.cur.description else None

    def executemany(self, statement, rows):
        self.cur.executemany(statement.replace("?", "%s"), rows)

    def start_capture(self, bootstrap):
        from headwater.cdc.postgres import PostgresConnector

        return PostgresConnector(self.dsn, [f"{self.schema}.{t}" for t in TABLES], "shop", bootstrap,
                                 slot="headwater_demo", publication="headwater_demo", log=lambda _: None)

    def streaming(self):
        # the slot turns active once the snapshot is shipped and the stream starts
        return self.execute("SELECT active FROM pg_replication_slots WHERE slot_name = 'headwater_demo'") == [(True,)]

    def captured(self):
        return self.execute("SELECT confirmed_flush_lsn >= pg_current_wal_lsn() FROM pg_replication_slots "
                            "WHERE slot_name = 'headwater_demo'") == [(True,)]

    def _drop_slot(self):
        # A slot left behind keeps WAL on the server forever: the demo cleans up after itself.
        self.cur.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = 'headwater_demo' AND NOT active")

    def close(self):
        # The server's walsender lets go of the slot a moment after the connector's connection
        # closes (longer on a busy machine): a slot still active then is not dropped, so wait.
        deadline = time.monotonic() + SLOT_RELEASE_S
        while self.streaming() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._drop_slot()
        self.cur.execute("DROP PUBLICATION IF EXISTS headwater_demo")
        self.db.close()


def _open_shop(shop, rng: random.Random) -> None:
    shop.executemany("INSERT INTO customers VALUES (?, ?, ?)",
                     [(i, f"customer-{i:03d}", rng.choice(["Lyon", "Oslo", "Pune"])) for i in range(50)])
    shop.executemany("INSERT INTO products VALUES (?, ?, ?)", [(i, f"sku-{i:02d}", rng.randrange(199, 9999))
                                                               for i in range(20)])
    shop.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, 'placed')",
                     [(i, rng.randrange(50), rng.randrange(20), rng.randint(1, 5)) for i in range(200)])


def _business(shop, rng: random.Random) -> None:
    """A day at the shop: new orders, shipments, cancellations, price changes, in transactions."""
    for i in range(200, 500):
        shop.execute("BEGIN")
        shop.execute("INSERT INTO orders VALUES (?, ?, ?, ?, 'placed')", (i, rng.randrange(50), rng.randrange(20),
                                                                          rng.randint(1, 5)))
        if i % 3 == 0:
            shop.execute("UPDATE orders SET status = 'shipped' WHERE id = ?", (rng.randrange(i),))
        if i % 15 == 0:
            shop.execute("DELETE FROM orders WHERE id = ?", (rng.randrange(i),))
        if i % 60 == 0:
            shop.execute("UPDATE products SET price_cents = price_cents + 100 WHERE id = ?", (rng.randrange(20),))
        shop.execute("COMMIT")


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
    dsn = os.environ.get("HEADWATER_DEMO_DSN")
    console.rule("[bold]Change data capture: the shop database (%s) as the source of truth"
                 % ("PostgreSQL" if dsn else "SQLite"))
    rng = random.Random(5)
    with tempfile.TemporaryDirectory(prefix="headwater-shop-") as tmp:
        shop = PostgresShop(dsn) if dsn else SqliteShop(tmp)
        _open_shop(shop, rng)
        connector = shop.start_capture(bootstrap)
        thread = threading.Thread(target=connector.run, daemon=True)
        thread.start()
        while thread.is_alive() and not shop.streaming():
            time.sleep(0.1)
        _business(shop, rng)
        while thread.is_alive() and not shop.captured():
            time.sleep(0.1)
        connector.stop()
        thread.join(30)
        source = {row[0]: row for row in shop.execute("SELECT id, customer_id, product_id, quantity, status "
                                                      "FROM orders")}
        shop.close()

    table = Table(title="change events per topic (op: r snapshot, c create, u update, d delete)")
    for column in ("topic", "r", "c", "u", "d", "tombstones"):
        table.add_column(column, justify="right")
    replayed, sample = {}, None
    orders_topic = f"shop.{shop.schema}.orders"
    for name in TABLES:
        topic = f"shop.{shop.schema}.{name}"
        counts = dict.fromkeys(("r", "c", "u", "d", None), 0)
        for msg in _read(bootstrap, topic):
            event = json.loads(msg.value()) if msg.value() is not None else None
            counts[event["op"] if event else None] += 1
            if topic == orders_topic and event:
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
    console.print(f"orders rebuilt from [bold]{orders_topic}[/] equal the source table: {replayed == source}")
