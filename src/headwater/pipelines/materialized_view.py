"""Table-table join maintained as a view: revenue per product from two changelogs.

Orders (key order_id, value {product_id, quantity}) and products (key product_id,
value {name, price}) arrive as changelog topics (see `changelog`). The view
revenue_per_product(product_id, name, orders, revenue) must reflect every insert,
update and delete on either side: a price change touches every order of the product,
an order moving to another product leaves the old one.

Why foreachBatch and not Spark state: a join in Spark state emits new pairs but never
retracts an old one, and transformWithState keyed by product cannot see an order's
previous product when the order moves. So each micro-batch of changes is applied, in
offset order, to local copies of both tables in SQLite, and the view rows of the
products it touched are recomputed — all in one transaction together with the batch
id, which makes a replayed batch a no-op (exactly-once).
"""

from __future__ import annotations

import json
import sqlite3

from pyspark.sql import DataFrame

SCHEMA = """
CREATE TABLE IF NOT EXISTS orders (order_id TEXT PRIMARY KEY, product_id TEXT, quantity INTEGER);
CREATE TABLE IF NOT EXISTS products (product_id TEXT PRIMARY KEY, name TEXT, price REAL);
CREATE TABLE IF NOT EXISTS revenue_per_product (product_id TEXT PRIMARY KEY, name TEXT, orders INTEGER,
                                                revenue REAL);
CREATE TABLE IF NOT EXISTS view_batches (batch_id INTEGER PRIMARY KEY);
"""
# The fields of the two changelogs' values (see `dead_letter.Shape`).
ORDER = {"product_id": "string", "quantity": "long"}
PRODUCT = {"name": "string", "price": "double"}


class RevenueView:
    """A foreachBatch function over the union of both topics' records (columns topic,
    partition, offset, key, value of the `headwater` source)."""

    def __init__(self, path: str, orders_topic: str = "orders", products_topic: str = "products"):
        self.path, self.orders_topic, self.products_topic = str(path), orders_topic, products_topic

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        records = sorted(batch.select("topic", "partition", "offset", "key", "value").collect(),
                         key=lambda r: (r.topic, r.partition, r.offset))
        db = sqlite3.connect(self.path)
        try:
            with db:
                db.executescript(SCHEMA)
                if db.execute("SELECT 1 FROM view_batches WHERE batch_id = ?", (batch_id,)).fetchone():
                    return
                touched = set()
                for r in records:
                    touched |= self._apply(db, r.topic, bytes(r.key).decode(), r.value and json.loads(bytes(r.value)))
                for product_id in touched:
                    self._recompute(db, product_id)
                db.execute("INSERT INTO view_batches VALUES (?)", (batch_id,))
        finally:
            db.close()

    def _apply(self, db, topic: str, key: str, row: dict | None) -> set[str]:
        """Apply one change; returns the products whose view row it may change."""
        if topic == self.products_topic:
            if row is None:
                db.execute("DELETE FROM products WHERE product_id = ?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO products VALUES (?, ?, ?)", (key, row["name"], row["price"]))
            return {key}
        before = db.execute("SELECT product_id FROM orders WHERE order_id = ?", (key,)).fetchone()
        if row is None:
            db.execute("DELETE FROM orders WHERE order_id = ?", (key,))
        else:
            db.execute("INSERT OR REPLACE INTO orders VALUES (?, ?, ?)", (key, row["product_id"], row["quantity"]))
        return {p for p in (before and before[0], row and row["product_id"]) if p}

    @staticmethod
    def _recompute(db, product_id: str) -> None:
        # An inner join: a product without orders, or orders of an unknown product, have no row.
        found = db.execute("""SELECT p.name, COUNT(*), SUM(o.quantity * p.price) FROM orders o
                              JOIN products p ON p.product_id = o.product_id WHERE p.product_id = ?
                              GROUP BY p.product_id, p.name""", (product_id,)).fetchone()
        if found is None:
            db.execute("DELETE FROM revenue_per_product WHERE product_id = ?", (product_id,))
        else:
            db.execute("INSERT OR REPLACE INTO revenue_per_product VALUES (?, ?, ?, ?)", (product_id, *found))


def read_view(path: str) -> dict[str, tuple]:
    """product_id -> (name, orders, revenue)."""
    db = sqlite3.connect(str(path))
    try:
        return {p: (n, c, r) for p, n, c, r in db.execute("SELECT * FROM revenue_per_product")}
    finally:
        db.close()
