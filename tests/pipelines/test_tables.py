"""Joins with tables kept from changelog topics: enrichment (stream-table) and a
maintained view (table-table), on a real broker."""

import json
import random

import pytest

from tests.support.sparkdata import BASE_MS, MINUTE, create_topic, headwater_stream, produce, run_to_end, ts

from headwater.pipelines import changelog, enrichment, lateness, materialized_view, reference
from pyspark.sql import functions as F

PROFILE = "name string, tier string"


def profile_history(rng):
    """Changes to four users' profiles over an hour: created, updated, deleted, re-created."""
    changes, clock = [], BASE_MS
    for user in ("u1", "u2", "u3", "u4"):
        changes.append((user, {"name": user.upper(), "tier": "free"}, clock + rng.randint(0, MINUTE)))
    for _ in range(16):
        clock += rng.randint(1, 6) * MINUTE
        user = rng.choice(("u1", "u2", "u3", "u4"))
        row = None if rng.random() < 0.2 else {"name": user.upper(), "tier": rng.choice(["free", "pro", "team"])}
        changes.append((user, row, clock))
    return sorted(changes, key=lambda c: c[2])


def test_clicks_enriched_with_profile_as_of_click_time(spark, broker, tmp_path):
    rng = random.Random(7)
    changes = profile_history(rng)
    clicks, clock = [], BASE_MS
    for n in range(50):
        clock += rng.randint(10_000, 80_000)
        t = clock - (rng.randint(5_000, 50_000) if rng.random() < 0.2 else 0)
        if n > 25 and rng.random() < 0.1:
            t = clock - 40 * MINUTE  # far too late
        clicks.append({"event_id": f"k{n}", "user_id": rng.choice(("u1", "u2", "u3", "u4", "u5")), "ts_ms": t})
    create_topic(broker.bootstrap, "profiles", 1, **{"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, "clicks", 1)
    produce(broker.bootstrap, "profiles", [(u.encode(), row and json.dumps(row).encode(), 0, None, t)
                                           for u, row, t in changes])
    produce(broker.bootstrap, "clicks", [(None, json.dumps(c).encode(), 0, None, None) for c in clicks])

    # Ground truth: batches of 10 clicks and 4 changes, one watermark over both.
    events = [[{**c, "kind": 1} for c in clicks[i * 10:(i + 1) * 10]] +
              [{"event_id": f"change:{j}", "user_id": u, "ts_ms": t, "kind": 0, "row": row, "seq": j}
               for j, (u, row, t) in enumerate(changes) if i * 4 <= j < (i + 1) * 4] for i in range(5)]
    kept, dropped, final_wm = reference.admitted(events, 5 * MINUTE)
    expected = {}
    for user in ("u1", "u2", "u3", "u4", "u5"):
        current = None
        for e in sorted((e for e in kept if e["user_id"] == user), key=lambda e: (e["ts_ms"], e["kind"], e.get("seq", 0))):
            if e["kind"] == 0:
                current = e["row"]
            elif e["ts_ms"] <= final_wm:
                expected[e["event_id"]] = (user, e["ts_ms"], current)

    click_stream = (headwater_stream(spark, broker.bootstrap, subscribe="clicks", startingOffsets="earliest",
                                     maxOffsetsPerTrigger=10)
                    .select(F.from_json(F.col("value").cast("string"), "event_id string, user_id string, ts_ms long")
                            .alias("c")).select("c.*")
                    .select(F.col("event_id").alias("click_id"), "user_id", F.timestamp_millis("ts_ms").alias("event_time")))
    profile_changes = changelog.changes(
        headwater_stream(spark, broker.bootstrap, subscribe="profiles", startingOffsets="earliest",
                         maxOffsetsPerTrigger=4), PROFILE)
    rows, query = run_to_end(enrichment.enrich_clicks(click_stream, profile_changes), tmp_path / "ck")

    got = {r.click_id: (r.user_id, r.click_time, r.profile and json.loads(r.profile)) for r in rows}
    assert got == {k: (u, ts(t), p) for k, (u, t, p) in expected.items()}
    assert sum(1 for _, _, p in expected.values() if p is None) >= 3  # unknown or deleted users
    assert len({json.dumps(p) for _, _, p in expected.values()}) >= 5
    assert lateness.dropped_events(query) == dropped > 0


def order_and_product_changes(rng):
    """Products and orders changing over time: price changes, orders changing quantity
    or moving to another product, deletes on both sides, a product re-created."""
    products = [("p1", {"name": "boots", "price": 80.0}), ("p2", {"name": "tent", "price": 200.0}),
                ("p3", {"name": "stove", "price": 45.5})]
    changes = [("products", k, v) for k, v in products]
    for n in range(40):
        roll = rng.random()
        if roll < 0.55:
            changes.append(("orders", f"o{rng.randint(1, 15)}", {"product_id": rng.choice(["p1", "p2", "p3", "p4"]),
                                                                 "quantity": rng.randint(1, 4)}))
        elif roll < 0.7:
            changes.append(("orders", f"o{rng.randint(1, 15)}", None))
        elif roll < 0.9:
            p = rng.choice(["p1", "p2", "p3", "p4"])
            changes.append(("products", p, {"name": f"item-{p}", "price": float(rng.randint(10, 300))}))
        else:
            changes.append(("products", rng.choice(["p1", "p2", "p3"]), None))
    return changes


def view_truth(changes):
    orders, products = {}, {}
    for topic, key, row in changes:
        table = orders if topic == "orders" else products
        if row is None:
            table.pop(key, None)
        else:
            table[key] = row
    view = {}
    for o in orders.values():
        p = products.get(o["product_id"])
        if p is not None:
            name, count, revenue = view.get(o["product_id"], (p["name"], 0, 0.0))
            view[o["product_id"]] = (name, count + 1, revenue + o["quantity"] * p["price"])
    return view


class FailAfter:
    """Wraps a foreachBatch sink: batch `n` is written, then the query fails, as if the
    driver died before Spark recorded the batch as committed."""

    def __init__(self, sink, n):
        self.sink, self.n = sink, n

    def __call__(self, batch, batch_id):
        self.sink(batch, batch_id)
        if batch_id == self.n:
            raise RuntimeError(f"simulated crash after writing batch {batch_id}")


def test_revenue_view_reflects_updates_and_deletes_on_both_sides(spark, broker, tmp_path):
    changes = order_and_product_changes(random.Random(8))
    create_topic(broker.bootstrap, "orders", 1, **{"cleanup.policy": "compact"})
    create_topic(broker.bootstrap, "products", 1, **{"cleanup.policy": "compact"})
    for topic in ("orders", "products"):
        produce(broker.bootstrap, topic, [(k.encode(), row and json.dumps(row).encode(), 0, None, None)
                                          for t, k, row in changes if t == topic])
    # Within one topic changes apply in offset order; across the two topics the order
    # can differ from `changes`, but the final tables (and so the view) cannot.
    expected = view_truth(changes)
    assert len(expected) >= 2

    db = tmp_path / "view.db"
    stream = headwater_stream(spark, broker.bootstrap, subscribe="orders,products", startingOffsets="earliest",
                              maxOffsetsPerTrigger=8)

    def run(sink):
        query = (stream.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()

    with pytest.raises(Exception, match="simulated crash after writing batch 2"):
        run(FailAfter(materialized_view.RevenueView(db), 2))
    run(materialized_view.RevenueView(db))  # restarts on the checkpoint: batch 2 again, then the rest

    got = materialized_view.read_view(db)
    assert got.keys() == expected.keys()
    for product, (name, count, revenue) in expected.items():
        assert got[product][:2] == (name, count) and abs(got[product][2] - revenue) < 1e-6
