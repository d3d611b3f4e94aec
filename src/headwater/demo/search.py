"""Chapter: search on streams and derived systems, on Spark.

Scene 1, the percolator: customers' standing searches sit in a compacted topic; the
catalogue's new products stream past them; each match goes to a topic keyed by the
search (`pipelines.percolator`, `pipelines.standing_queries`).

Scene 2, keeping systems in sync: two application threads write a product to the
database and then to a search index (dual writes) and leave the two disagreeing; the
index fed from the database's change stream (CDC -> `pipelines.derived`) agrees with it.

Each answer is checked against plain Python (`pipelines.reference`) as the chapter runs.
"""
from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.cdc import sqlite as cdc_sqlite
from headwater.demo.outdoor_shop import document, standing_query
from headwater.demo.shop_events import morning
from headwater.demo.spark_chapter import Chapter, report_table, workspace
from headwater.pipelines import derived, reference, standing_queries

T0 = 1_700_000_000_000
QUERIES, DOCUMENTS, MATCHES = "standing-searches", "new-products", "search-matches"
TENT_UNDER_100 = {"all": [{"term": ["title", "tent"]}, {"field": "price", "op": "<", "value": 100},
                          {"field": "category", "op": "=", "value": "tents"}]}
ROWS = 20  # the products both dual writers update


def _produce(bootstrap: str, topic: str, records: list[tuple]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    failed = []
    for key, value, ts in records:
        producer.produce(topic, value, key, timestamp=ts, on_delivery=lambda err, _: err and failed.append(err))
    if producer.flush(30) or failed:
        raise RuntimeError(f"producing to {topic}: {failed[:1] or 'not acknowledged'}")


def percolator(chapter: Chapter) -> None:
    """1,000 standing searches; 300 new products; a search changed and one deleted mid-way."""
    rng = random.Random(8)
    admin = AdminClient({"bootstrap.servers": chapter.bootstrap})
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
    _produce(chapter.bootstrap, QUERIES, changes)
    _produce(chapter.bootstrap, DOCUMENTS, docs)
    state = chapter.workdir / "percolator.db"
    query = chapter.start("percolator", chapter.records(f"{QUERIES},{DOCUMENTS}"), standing_queries.Percolator(
        state, {"bootstrap.servers": chapter.bootstrap}, QUERIES, MATCHES))
    chapter.wait(query)
    written = (chapter.spark.read.format("headwater").option("kafka.bootstrap.servers", chapter.bootstrap)
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
    chapter.console.print(table)
    searches = len({key for key, _, _ in changes} - {b"bob:stoves"})
    chapter.console.print(f"{len(got):,} matches of {len(docs)} products against {searches:,} standing searches, "
                          f"keyed by search in {MATCHES}; rejected and counted: {len(rejects)} ("
                          + "; ".join(sorted({r.split(':')[0] for r in rejects.values()})) + ")")
    want, want_rejects = reference.percolate(
        [(ts, 0, offset, key.decode(), value) for offset, (key, value, ts) in enumerate(changes)],
        [(ts, 0, offset, value) for offset, (_, value, ts) in enumerate(docs)])
    chapter.check("percolator", matches=(got, want), rejected_documents=(
        {(p, o, q) for t, p, o, q in rejects if t == DOCUMENTS}, want_rejects))


class _DualWriter(threading.Thread):
    """The application writing a product to the database, then to its search index."""

    def __init__(self, name: str, db_path: str, index_path: Path, seed: int, together: threading.Barrier):
        super().__init__(name=name)
        self.db_path, self.index_path, self.rng, self.together = db_path, index_path, random.Random(seed), together

    def run(self) -> None:
        db = sqlite3.connect(self.db_path, isolation_level=None, timeout=30)
        index = sqlite3.connect(self.index_path, timeout=30)
        writer = derived.SearchIndex(self.index_path, ["title"])
        for product in range(ROWS):
            self.together.wait()  # two requests for the same product at the same moment
            title = f"{self.name}'s {self.rng.choice(['red', 'blue', 'green'])} tent"
            db.execute("UPDATE products SET title = ? WHERE id = ?", (title, product))
            time.sleep(self.rng.uniform(0, 0.005))  # the network between the two writes
            with index:
                writer.upsert(index, json.dumps({"id": product}, separators=(",", ":")), {"title": title})
        db.close()
        index.close()


def derived_systems(chapter: Chapter) -> None:
    """Dual writes race; the CDC-fed search index and cache agree with the database."""
    path = str(chapter.workdir / "catalogue.db")
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT NOT NULL)")
    db.executemany("INSERT INTO products VALUES (?, ?)", [(i, f"tent {i}") for i in range(ROWS)])
    dual = chapter.workdir / "dual-written.db"
    with sqlite3.connect(dual) as index:
        writer = derived.SearchIndex(dual, ["title"])
        index.executescript(derived.OFFSETS + writer.schema)
        for i in range(ROWS):
            writer.upsert(index, json.dumps({"id": i}, separators=(",", ":")), {"title": f"tent {i}"})
    cdc_sqlite.install(db, ["products"])  # from here on every change enters the database's own log
    connector = cdc_sqlite.SqliteConnector(path, ["products"], "catalogue", chapter.bootstrap, log=lambda _: None)
    thread = threading.Thread(target=connector.run, daemon=True)
    thread.start()
    together = threading.Barrier(2)
    writers = [_DualWriter(name, path, dual, seed, together) for seed, name in enumerate(("alice", "bob"))]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    while thread.is_alive() and db.execute(f"SELECT count(*) FROM {cdc_sqlite.CHANGELOG}").fetchone() != (0,):
        time.sleep(0.1)
    connector.stop()
    thread.join(30)
    rows = {json.dumps({"id": i}, separators=(",", ":")): {"id": i, "title": t}
            for i, t in db.execute("SELECT id, title FROM products")}
    db.close()

    changes = chapter.records("catalogue.main.products")
    fed, cache = chapter.workdir / "search.db", chapter.workdir / "cache.db"
    for name, sink in (("search index from CDC", derived.SearchIndex(fed, ["title"])),
                       ("cache from CDC", derived.Cache(cache))):
        chapter.wait(chapter.start(name, changes, sink))
    in_db = {k: row["title"] for k, row in rows.items()}
    dual_index = {k: v["title"] for k, v in derived.indexed(dual, ["title"]).items()}
    cdc_index = {k: v["title"] for k, v in derived.indexed(fed, ["title"]).items()}

    table = report_table("product titles: the database, the dual-written index, the CDC-fed index", "product",
                         "database", "dual-written index", "CDC-fed index")
    for key in sorted(in_db, key=lambda k: json.loads(k)["id"]):
        mark = "[bold red]" if dual_index.get(key) != in_db[key] else ""
        table.add_row(str(json.loads(key)["id"]), in_db[key], mark + str(dual_index.get(key)), cdc_index.get(key))
    chapter.console.print(table)
    disagree = sum(dual_index.get(k) != v for k, v in in_db.items())
    chapter.console.print(
        f"dual writes (alice and bob each update the database, then the index): {disagree} of {ROWS} products "
        f"disagree, where the two reached the database in one order and the index in the other"
        + ("" if disagree else " (this time the race was not lost)"))
    chapter.console.print(f"CDC-fed index and cache, applying the database's own log in order: "
                          f"{sum(cdc_index.get(k) != v for k, v in in_db.items())} disagree")
    want_titles = {word: reference.text_search(rows, ["title"], word) for word in ("alice", "bob", "red", "tent")}
    chapter.check("derived systems", index=(cdc_index, in_db), cache=(derived.cached(cache), rows),
                  searches=({w: derived.search(fed, w) for w in want_titles}, want_titles))


def run(bootstrap: str, console, spark=None) -> None:
    console.rule("[bold]Search on streams and derived systems on Spark: the percolator, CDC-fed index and cache")
    started = time.monotonic()
    with workspace(console, spark) as (session, workdir):
        chapter = Chapter(bootstrap, console, session, workdir, morning())
        try:
            percolator(chapter)
            derived_systems(chapter)
        finally:
            chapter.stop()
    console.print(f"{len(chapter.queries)} Spark queries; {time.monotonic() - started:.0f} s for the chapter")
