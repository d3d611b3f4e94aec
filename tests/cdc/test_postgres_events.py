"""The PostgreSQL connector against a real PostgreSQL 15 and a real Headwater broker."""
import base64

import pytest

from headwater.cdc import CdcError
from headwater.cdc.envelope import UNAVAILABLE
from headwater.cdc.postgres import PostgresConnector

from tests.support.cdc_harness import Running, caught_up, sql
from tests.support.cdc_topics import changes, read_topic, replay, wait_for


def test_inserts_updates_deletes_truncates_as_debezium_events(pg_db, broker):
    sql(pg_db, "CREATE TABLE customers (id int PRIMARY KEY, name text, balance numeric(12,2), joined timestamptz,"
               " photo bytea, notes text);"
               "ALTER TABLE customers ALTER COLUMN notes SET STORAGE EXTERNAL;"
               "CREATE TABLE audit (id int PRIMARY KEY, note text); ALTER TABLE audit REPLICA IDENTITY FULL")
    run = Running(pg_db, broker, ["customers", "public.audit"])
    run.wait_streaming(pg_db)
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(100_000))
    sql(pg_db, "INSERT INTO customers VALUES (1, 'ann', 10.50, '2024-01-01 10:00:00+02', '\\x0001', %s)", (big,))
    sql(pg_db, "BEGIN; INSERT INTO customers VALUES (2, 'bob', 0, NULL, NULL, NULL);"
               "UPDATE customers SET balance = 20 WHERE id = 1; INSERT INTO audit VALUES (1, 'x'); COMMIT")
    sql(pg_db, "UPDATE customers SET id = 3 WHERE id = 2")
    sql(pg_db, "UPDATE audit SET note = 'y'")
    sql(pg_db, "ALTER TABLE customers ADD COLUMN tier int DEFAULT 1")
    sql(pg_db, "INSERT INTO customers (id, name) VALUES (4, 'cy')")
    sql(pg_db, "DELETE FROM customers WHERE id = 1")
    sql(pg_db, "DELETE FROM audit")
    sql(pg_db, "TRUNCATE customers")
    caught_up(pg_db)
    run.close()

    db = pg_db.rsplit("dbname=", 1)[1]
    customers = read_topic(broker.bootstrap, "shop.public.customers")
    audit = read_topic(broker.bootstrap, "shop.public.audit")
    events = changes(customers)
    assert [(e["op"], (e["after"] or e["before"] or {}).get("id")) for e in events] == [
        ("c", 1), ("c", 2), ("u", 1), ("d", 2), ("c", 3), ("c", 4), ("d", 1), ("t", None)]
    c1, c2, u1, d2, c3, c4, d1, t = events
    assert c1["before"] is None and c1["after"] == {
        "id": 1, "name": "ann", "balance": "10.50", "joined": "2024-01-01T08:00:00+00:00",
        "photo": base64.b64encode(b"\x00\x01").decode(), "notes": big}
    assert c1["source"]["connector"] == "postgresql" and c1["source"]["db"] == db
    assert (c1["source"]["schema"], c1["source"]["table"], c1["source"]["snapshot"]) == ("public", "customers", "false")
    assert all(isinstance(e["source"][f], int) for e in events for f in ("lsn", "txId", "ts_ms"))
    # one transaction: one txId, in statement order
    assert c2["source"]["txId"] == u1["source"]["txId"] != c1["source"]["txId"]
    # default replica identity: no before-image; the untouched TOASTed column is marked, not invented
    assert u1["before"] is None and u1["after"]["balance"] == "20.00" and u1["after"]["notes"] == UNAVAILABLE
    # a key change: delete of the old key (+ tombstone), create of the new key
    assert d2["before"]["id"] == 2 and d2["after"] is None and c3["after"]["name"] == "bob"
    assert c4["after"] == {"id": 4, "name": "cy", "balance": None, "joined": None, "photo": None, "notes": None, "tier": 1}
    assert d1["before"] == {"id": 1, "name": None, "balance": None, "joined": None, "photo": None, "notes": None,
                            "tier": None}
    assert t["before"] is None and t["after"] is None
    # keys are the primary key as JSON; each delete is followed by a tombstone on the same partition
    for deleted in (1, 2):
        recs = [r for r in customers if r["key"] == {"id": deleted}]
        assert len({r["partition"] for r in recs}) == 1
        assert recs[-1]["value"] is None and recs[-2]["value"]["op"] == "d"

    full = changes(audit)
    assert [(e["op"], e["before"], e["after"]) for e in full] == [
        ("c", None, {"id": 1, "note": "x"}), ("u", {"id": 1, "note": "x"}, {"id": 1, "note": "y"}),
        ("d", {"id": 1, "note": "y"}, None)]
    assert replay(audit)[0] == {}

    # the connector's own position, stored after the last change was acknowledged; the slot
    # confirmed at least that much (psycopg2 may confirm the server's WAL end on top when idle)
    positions = [r for r in read_topic(broker.bootstrap, "headwater-cdc-positions", json_keys=False)
                 if r["key"] == b"postgresql:headwater"]
    confirmed = sql(pg_db, "SELECT confirmed_flush_lsn - '0/0' FROM pg_replication_slots")[0][0]
    assert positions[-1]["value"]["snapshot_done"] is True
    assert t["source"]["lsn"] < positions[-1]["value"]["lsn"] <= int(confirmed)


def test_snapshot_modes(pg_db, broker):
    sql(pg_db, "CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t SELECT g, g FROM generate_series(1, 50) g")
    run = Running(pg_db, broker, ["t"], snapshot_mode="never")
    run.wait_streaming(pg_db)
    sql(pg_db, "UPDATE t SET v = -1 WHERE id = 7")
    caught_up(pg_db)
    run.close()
    assert [(e["op"], e["after"]) for e in changes(read_topic(broker.bootstrap, "shop.public.t"))] == [
        ("u", {"id": 7, "v": -1})]

    # the slot is lost while a position is stored: `initial` refuses, `when_needed` snapshots again
    sql(pg_db, "SELECT pg_drop_replication_slot('headwater')")
    with pytest.raises(CdcError, match="when_needed"):
        PostgresConnector(pg_db, ["t"], "shop", broker.bootstrap, log=lambda _: None).run()
    run = Running(pg_db, broker, ["t"], snapshot_mode="when_needed")
    wait_for(lambda: len(read_topic(broker.bootstrap, "shop.public.t")) == 51, what="snapshot")
    sql(pg_db, "DELETE FROM t WHERE id = 50")
    caught_up(pg_db)
    run.close()
    records = read_topic(broker.bootstrap, "shop.public.t")
    reads = [e for e in changes(records) if e["op"] == "r"]
    assert sorted(e["after"]["id"] for e in reads) == list(range(1, 51))
    assert [e["source"]["snapshot"] for e in reads].count("last") == 1
    table, _ = replay(records)
    assert table == {i: {"id": i, "v": -1 if i == 7 else i} for i in range(1, 50)}
