"""Chapter: keeping systems in sync, the sequel of change data capture (`cdc_shop`), on Spark.

Two application threads write a product to the database and then to a search index
(dual writes) and leave the two disagreeing; the index and the cache fed from the
database's change stream (the CDC connector -> the shipped `search-index` and `cache`
pipelines, `pipelines.derived`) agree with it. Checked as the chapter runs: the index and
the cache against the database's rows, searches against plain Python's (`reference.text_search`).
"""
from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from pathlib import Path

from headwater.cdc import sqlite as cdc_sqlite
from headwater.demo.spark_chapter import check, report_table, run_pipeline, workspace
from headwater.pipelines import derived, reference

ROWS = 20  # the products both dual writers update
CHANGES = "catalogue.main.products"  # the connector's topic of the products table


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


def derived_systems(spark, bootstrap: str, workdir: Path, console) -> None:
    """Dual writes race; the CDC-fed search index and cache agree with the database."""
    path = str(workdir / "catalogue.db")
    db = sqlite3.connect(path, isolation_level=None, timeout=30)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT NOT NULL)")
    db.executemany("INSERT INTO products VALUES (?, ?)", [(i, f"tent {i}") for i in range(ROWS)])
    dual = workdir / "dual-written.db"
    with sqlite3.connect(dual) as index:
        writer = derived.SearchIndex(dual, ["title"])
        index.executescript(derived.OFFSETS + writer.schema)
        for i in range(ROWS):
            writer.upsert(index, json.dumps({"id": i}, separators=(",", ":")), {"title": f"tent {i}"})
    cdc_sqlite.install(db, ["products"])  # from here on every change enters the database's own log
    connector = cdc_sqlite.SqliteConnector(path, ["products"], "catalogue", bootstrap, log=lambda _: None)
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

    run_pipeline(spark, bootstrap, workdir, "search-index", changes=CHANGES, fields="title")  # the shipped ones
    run_pipeline(spark, bootstrap, workdir, "cache", changes=CHANGES)
    fed, cache = workdir / "search.db", workdir / "cache.db"
    in_db = {k: row["title"] for k, row in rows.items()}
    dual_index = {k: v["title"] for k, v in derived.indexed(dual, ["title"]).items()}
    cdc_index = {k: v["title"] for k, v in derived.indexed(fed, ["title"]).items()}

    table = report_table("product titles: the database, the dual-written index, the CDC-fed index", "product",
                         "database", "dual-written index", "CDC-fed index")
    for key in sorted(in_db, key=lambda k: json.loads(k)["id"]):
        mark = "[bold red]" if dual_index.get(key) != in_db[key] else ""
        table.add_row(str(json.loads(key)["id"]), in_db[key], mark + str(dual_index.get(key)), cdc_index.get(key))
    console.print(table)
    disagree = sum(dual_index.get(k) != v for k, v in in_db.items())
    console.print(
        f"dual writes (alice and bob each update the database, then the index): {disagree} of {ROWS} products "
        f"disagree, where the two reached the database in one order and the index in the other"
        + ("" if disagree else " (this time the race was not lost)"))
    console.print(f"CDC-fed index and cache, applying the database's own log in order: "
                  f"{sum(cdc_index.get(k) != v for k, v in in_db.items())} disagree")
    want_titles = {word: reference.text_search(rows, ["title"], word) for word in ("alice", "bob", "red", "tent")}
    check(console, "derived systems", index=(cdc_index, in_db), cache=(derived.cached(cache), rows),
          searches=({w: derived.search(fed, w) for w in want_titles}, want_titles))


def run(bootstrap: str, console, spark=None) -> None:
    console.rule("[bold]Keeping systems in sync on Spark: dual writes vs an index and a cache fed by CDC")
    started = time.monotonic()
    with workspace(console, spark) as (session, workdir):
        derived_systems(session, bootstrap, workdir, console)
    console.print(f"{time.monotonic() - started:.0f} s for the chapter")
