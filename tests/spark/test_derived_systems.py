"""The shipped `search-index` and `cache` pipelines on Spark, fed by the real SQLite CDC
connector through a real broker: stopped mid-stream and restarted from the checkpoint,
they equal the database (and a rebuild from offset 0), each change applied once; a
record that is not a change event is counted, and the pipeline goes on."""
import random
import sqlite3
import threading
import time

from sparkdata import produce, read_back

from headwater.cdc import sqlite as cdc_sqlite
from headwater.demo.outdoor_shop import document
from headwater.pipelines import derived, reference
from headwater.pipelines.catalog import PIPELINES, Run

TOPIC = "shop.main.products"
FIELDS = ["title", "category"]


def _capture(path: str, bootstrap: str, change) -> None:
    """Run the CDC connector on the database while `change` changes it, until all is shipped."""
    db = sqlite3.connect(path)
    cdc_sqlite.install(db, ["products"])  # the triggers: changes from now on (and the first snapshot) are captured
    connector = cdc_sqlite.SqliteConnector(path, ["products"], "shop", bootstrap, log=lambda _: None)
    thread = threading.Thread(target=connector.run, daemon=True)
    thread.start()
    change()
    deadline = time.monotonic() + 60
    while db.execute(f"SELECT count(*) FROM {cdc_sqlite.CHANGELOG}").fetchone() != (0,):
        assert time.monotonic() < deadline and thread.is_alive(), "the connector did not ship the changes"
        time.sleep(0.1)
    db.close()
    connector.stop()
    thread.join(30)


def _run(spark, broker, out, trigger, per_trigger="10000"):
    return [PIPELINES[name].start(Run(spark, {"bootstrap.servers": broker.bootstrap}, out / "checkpoints", out,
                                      trigger, {**PIPELINES[name].params, "fields": ",".join(FIELDS),
                                                "per-trigger": per_trigger}))
            for name in ("search-index", "cache")]


def _rows(path) -> dict[str, dict]:
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    rows = {f'{{"id":{r["id"]}}}': dict(r) for r in db.execute("SELECT * FROM products")}
    db.close()
    return rows


def test_index_and_cache_follow_the_database_exactly_once(spark, broker, tmp_path):
    rng = random.Random(4)
    path = str(tmp_path / "shop.db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, title TEXT, category TEXT, price INTEGER)")
    db.executemany("INSERT INTO products VALUES (?, ?, ?, ?)",
                   [(i, d["title"], d["category"], d["price"]) for i, d in ((i, document(rng, i)) for i in range(150))])

    def business():
        for i in range(150, 300):
            d = document(rng, i)
            db.execute("INSERT INTO products VALUES (?, ?, ?, ?)", (i, d["title"], d["category"], d["price"]))
            if i % 3 == 0:
                db.execute("UPDATE products SET title = ? WHERE id = ?", (document(rng, i)["title"], rng.randrange(i)))
            if i % 7 == 0:
                db.execute("DELETE FROM products WHERE id = ?", (rng.randrange(i),))

    _capture(path, broker.bootstrap, business)
    out = tmp_path / "run"
    queries = _run(spark, broker, out, {"processingTime": "200 milliseconds"}, per_trigger="40")
    deadline = time.monotonic() + 180
    while any(q.lastProgress is None or q.lastProgress["batchId"] < 1 for q in queries):
        assert time.monotonic() < deadline, "no progress"
        failed = [q.exception() for q in queries if q.exception()]
        assert not failed, failed[0]
        time.sleep(0.2)
    for query in queries:
        query.stop()  # mid-stream: more changes are waiting
    produce(broker.bootstrap, TOPIC, [(b'{"id":1}', b"not json", 0, None, None)])
    _capture(path, broker.bootstrap, lambda: db.execute("UPDATE products SET title = 'alpine tent' WHERE id = 1"))
    for query in _run(spark, broker, out, {"availableNow": True}):
        query.awaitTermination()

    rows = _rows(path)
    records = read_back(broker.bootstrap, TOPIC)
    in_log_order = [(key.decode(), value) for (_, _), (key, value) in sorted(records.items()) if value != b"not json"]
    assert reference.table_from_changes(in_log_order) == rows and len(rows) > 200
    cached = derived.cached(out / "cache.db")
    assert cached == rows
    for word in ("tent", "alpine", "stove", "tents", "brand007", "nowhere"):
        assert derived.search(out / "search.db", word) == reference.text_search(rows, FIELDS, word)
    assert derived.search(out / "search.db", "alpine") >= {'{"id":1}'}
    index = sqlite3.connect(out / "search.db")
    assert index.execute("SELECT count(*) FROM search").fetchone() == (len(rows),)  # each row once
    index.close()
    bad = [(p, o) for (p, o), (_, value) in records.items() if value == b"not json"]
    assert derived.rejected(out / "search.db") == derived.rejected(out / "cache.db") == {
        (TOPIC, *bad[0]): "not JSON: Expecting value: line 1 column 1 (char 0)"}

    rebuilt = tmp_path / "rebuilt"  # a new store from offset 0 of the log
    for query in _run(spark, broker, rebuilt, {"availableNow": True}):
        query.awaitTermination()
    assert derived.cached(rebuilt / "cache.db") == cached
    for word in ("tent", "alpine", "brand007"):
        assert derived.search(rebuilt / "search.db", word) == derived.search(out / "search.db", word)
