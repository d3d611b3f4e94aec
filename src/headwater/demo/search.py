"""A scene of the analytics chapter (`analytics`): search on streams, the percolator.

Customers' standing searches sit in a compacted topic; the catalogue's new products
stream past them; the shipped `percolator` pipeline (`pipelines.standing_queries`)
matches each product against the searches as of its own time and writes each match to
a topic keyed by the search. Checked against plain Python (`reference.percolate`).
"""
from __future__ import annotations

import json
import random
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.demo.outdoor_shop import document, standing_query
from headwater.demo.spark_chapter import check, report_table, run_pipeline
from headwater.pipelines import reference, standing_queries

T0 = 1_700_000_000_000
QUERIES, DOCUMENTS, MATCHES = "standing-searches", "new-products", "search-matches"
TENT_UNDER_100 = {"all": [{"term": ["title", "tent"]}, {"field": "price", "op": "<", "value": 100},
                          {"field": "category", "op": "=", "value": "tents"}]}


def _produce(bootstrap: str, topic: str, records: list[tuple]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for key, value, ts in records:
        producer.produce(topic, value, key, timestamp=ts, on_delivery=lambda err, _: err and failed.append(err))
    if producer.flush(30) or failed:
        raise RuntimeError(f"producing to {topic}: {failed[:1] or 'not acknowledged'}")


def percolator(spark, bootstrap: str, workdir: Path, console) -> None:
    """1,000 standing searches; 300 new products; a search changed and one deleted mid-way."""
    rng = random.Random(8)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(QUERIES, 1, 1, config={"cleanup.policy": "compact"}),
                                       NewTopic(DOCUMENTS, 1, 1), NewTopic(MATCHES, 1, 1)]).values():
        future.result(30)
    changes = [(b"ann:tent-under-100", json.dumps(TENT_UNDER_100).encode(), T0)]
    changes += [(f"customer-{i:04d}".encode(), json.dumps(standing_query(rng)).encode(), T0 + i) for i in range(1000)]
    changes += [(b"bob:stoves", b'{"term": ["title", "stove"', T0 + 1001)]  # malformed: rejected, counted
    midway = T0 + 60_000 + 200
    changes += [(b"ann:tent-under-100", json.dumps({**TENT_UNDER_100, "all": TENT_UNDER_100["all"][:2]}).encode(),
                 midway), (b"customer-0001", None, midway)]  # ann drops the category; customer-0001 unsubscribes
    docs = [(None, json.dumps(document(rng, n)).encode(), T0 + 60_000 + n) for n in range(300)]
    docs[17] = (None, b"<product>not json</product>", docs[17][2])
    _produce(bootstrap, QUERIES, changes)
    _produce(bootstrap, DOCUMENTS, docs)
    run_pipeline(spark, bootstrap, workdir, "percolator", queries=QUERIES, documents=DOCUMENTS, matches=MATCHES)
    state = workdir / "percolator.db"
    written = (spark.read.format("headwater").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", MATCHES).load().collect())
    matches = [json.loads(bytes(r.value)) for r in written]
    got = {(m["query_id"], m["partition"], m["offset"]) for m in matches}
    rejects = standing_queries.read_rejects(state)

    table = report_table("ann's standing search, as of each product's time", "product", "title", "category",
                         "price", "ann's search then", numbers=1)
    for m in sorted((m for m in matches if m["query_id"] == "ann:tent-under-100"), key=lambda m: m["offset"]):
        doc = json.loads(m["document"])
        version = "tent, < 100, in tents" if m["ts_ms"] < midway else "tent, < 100"
        table.add_row(doc["sku"], doc["title"], doc["category"], str(doc["price"]), version)
    console.print(table)
    searches = len({key for key, _, _ in changes} - {b"bob:stoves"})
    console.print(f"{len(got):,} matches of {len(docs)} products against {searches:,} standing searches, "
                          f"keyed by search in {MATCHES}; rejected and counted: {len(rejects)} ("
                          + "; ".join(sorted({r.split(':')[0] for r in rejects.values()})) + ")")
    want, want_rejects = reference.percolate(
        [(ts, 0, offset, key.decode(), value) for offset, (key, value, ts) in enumerate(changes)],
        [(ts, 0, offset, value) for offset, (_, value, ts) in enumerate(docs)])
    check(console, "percolator", matches=(got, want), rejected_documents=(
        {(p, o, q) for t, p, o, q in rejects if t == DOCUMENTS}, want_rejects))
