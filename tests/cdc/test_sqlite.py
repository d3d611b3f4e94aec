"""The SQLite connector: triggers + changelog + poller, against a real broker (see
test_contract for the guarantees both connectors share)."""
import base64
import sqlite3
import subprocess
import sys
import threading
import time

from headwater.cdc.sqlite import CHANGELOG, SqliteConnector

from tests.support.cdc_harness import ConnectorProcess
from tests.support.cdc_sources import drained, make_db, query
from tests.support.cdc_topics import changes, read_topic, replay, wait_for


def test_sqlite_changes_as_debezium_events(tmp_path, broker):
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL, img BLOB);"
                  "INSERT INTO items VALUES (1, 'pen', 1.5, x'00ff'), (2, 'ink', NULL, NULL);")
    stop = threading.Event()
    connector = SqliteConnector(path, ["items"], "shop", broker.bootstrap, log=lambda _: None)
    thread = threading.Thread(target=connector.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    wait_for(lambda: len(read_topic(broker.bootstrap, "shop.main.items")) == 2, what="the snapshot")
    query(path, "INSERT INTO items VALUES (3, 'pad', 2.25, NULL)")
    query(path, "UPDATE items SET price = 9.75 WHERE id = 1")
    query(path, "UPDATE items SET id = 4 WHERE id = 2")
    conn = sqlite3.connect(path, timeout=30)
    conn.execute("DELETE FROM items WHERE id = 3")
    conn.execute("UPDATE items SET name = 'ink2' WHERE id = 4")
    conn.commit()
    conn.close()
    wait_for(lambda: drained(path), what="changelog trimmed")
    stop.set()
    thread.join(30)

    records = read_topic(broker.bootstrap, "shop.main.items")
    events = changes(records)
    assert [(e["op"], (e["after"] or e["before"])["id"]) for e in events] == [
        ("r", 1), ("r", 2), ("c", 3), ("u", 1), ("d", 2), ("c", 4), ("d", 3), ("u", 4)]
    r1, r2, c3, u1, d2, c4, d3, u4 = events
    assert r1["after"] == {"id": 1, "name": "pen", "price": 1.5, "img": base64.b64encode(b"\x00\xff").decode()}
    assert r1["source"]["snapshot"] == "true" and c3["source"]["snapshot"] == "false"
    assert (c3["source"]["connector"], c3["source"]["db"], c3["source"]["schema"], c3["source"]["table"]) == (
        "sqlite", "shop.db", "main", "items")
    assert u1["before"]["price"] == 1.5 and u1["after"]["price"] == 9.75  # triggers always see the old row
    assert d2["before"] == {"id": 2, "name": "ink", "price": None, "img": None} and c4["after"]["name"] == "ink"
    assert u4["before"]["name"] == "ink" and u4["after"]["name"] == "ink2"
    assert all(isinstance(e["source"]["ts_ms"], int) for e in events)
    for deleted in (2, 3):
        recs = [r for r in records if r["key"] == {"id": deleted}]
        assert recs[-1]["value"] is None and recs[-2]["value"]["op"] == "d"
    assert {k: row for k, row in replay(records)[0].items()} == {
        1: {"id": 1, "name": "pen", "price": 9.75, "img": base64.b64encode(b"\x00\xff").decode()},
        4: {"id": 4, "name": "ink2", "price": None, "img": None}}


def cdc(*args):
    return subprocess.run([sys.executable, "-m", "headwater", "cdc", "sqlite", *args], capture_output=True,
                          text=True, timeout=60)


def test_trigger_commands_and_bad_input(tmp_path):
    path = str(tmp_path / "shop.db")
    missing = cdc("--db", str(tmp_path / "nope.db"), "--tables", "items", "--install-triggers")
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert "SQLite database" in missing.stderr and "does not exist" in missing.stderr
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'a');")
    bad = cdc("--db", path, "--tables", "items,nope", "--install-triggers")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr and "table nope does not exist" in bad.stderr
    assert query(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'") == []  # all or nothing

    assert cdc("--db", path, "--tables", "items", "--install-triggers").returncode == 0
    triggers = {name for (name,) in query(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert triggers == {"_headwater_items_insert", "_headwater_items_update", "_headwater_items_delete"}
    query(path, "UPDATE items SET name = 'b'")
    assert [(op, after) for op, after in query(path, f"SELECT op, after FROM {CHANGELOG} ORDER BY id")] == [
        ("r", '{"id":1,"name":"a"}'), ("u", '{"id":1,"name":"b"}')]
    assert cdc("--db", path, "--tables", "items", "--install-triggers").returncode == 0  # again: no second snapshot
    assert query(path, f"SELECT count(*) FROM {CHANGELOG}") == [(2,)]

    assert cdc("--db", path, "--tables", "items", "--remove-triggers").returncode == 0
    assert query(path, "SELECT name FROM sqlite_master WHERE type IN ('trigger', 'table') "
                       "AND name != 'sqlite_sequence'") == [("items",)]


def test_changelog_is_trimmed_only_after_the_broker_acknowledged(tmp_path, broker):
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT);")
    broker.stop()
    connector = ConnectorProcess("sqlite", "--db", path, "--tables", "items", "--bootstrap-server", broker.bootstrap,
                                 log_path=tmp_path / "connector.log").start()
    wait_for(lambda: "waiting for the broker" in connector.log(), what="the connector to wait")
    query(path, "INSERT INTO items VALUES (1, 'a'), (2, 'b')")
    assert query(path, f"SELECT count(*) FROM {CHANGELOG}") == [(2,)]
    broker.start()
    wait_for(lambda: drained(path), what="changelog trimmed")
    broker.stop()  # while the broker is down again, new rows stay in the changelog
    query(path, "INSERT INTO items VALUES (3, 'c')")
    time.sleep(1)  # the poller has seen the row and produced it; the broker cannot acknowledge it
    assert query(path, f"SELECT id > 0 FROM {CHANGELOG}") == [(1,)]
    broker.start()
    wait_for(lambda: drained(path), what="changelog trimmed")
    assert connector.stop() == 143, connector.log()  # SIGTERM: stopped cleanly
    events = changes(read_topic(broker.bootstrap, "shop.main.items"))  # default prefix: the file's name
    assert [(e["op"], e["after"]["id"]) for e in events] == [("c", 1), ("c", 2), ("c", 3)]
