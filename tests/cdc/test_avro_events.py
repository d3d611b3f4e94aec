"""CDC with --schema-registry: change events in Confluent's wire format, each table's schema from
its columns in the broker's own registry. confluent-kafka's AvroDeserializer reads the topics
unchanged; an added column registers version 2; a change the subject's compatibility refuses
stops the connector before the change, which a restart ships once the subject allows it."""
from datetime import date, datetime, timezone

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.cdc import CdcError
from headwater.cdc.sqlite import SqliteConnector
from headwater.testing import BrokerProcess

from tests.support.cdc_harness import InThread, Running, caught_up, sql
from tests.support.cdc_sources import drained, make_db, query
from tests.support.cdc_topics import read_topic, wait_for

UTC = timezone.utc


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("cdc-avro") / "data", "--num-partitions", "3",
                       "--http-listener", "127.0.0.1:0") as proc:
        yield proc


def decoded(broker, topic):
    """[(key, value, value's schema id)] of every record, as an independent AvroDeserializer reads them."""
    registry = SchemaRegistryClient({"url": broker.console_url})
    deserialize = AvroDeserializer(registry)
    keys, values = (SerializationContext(topic, field) for field in (MessageField.KEY, MessageField.VALUE))
    return [(deserialize(r["key"], keys), deserialize(r["value"], values),
             None if r["value"] is None else int.from_bytes(r["value"][1:5], "big"))
            for r in read_topic(broker.bootstrap, topic, json_keys=False, json_values=False)]


def in_order(records):
    """The change events (no tombstones) in LSN order, a key change's delete first."""
    return sorted((value for _, value, _ in records if value is not None),
                  key=lambda v: (v["source"]["lsn"], v["op"] != "d"))


def test_postgres_rows_in_avro_and_a_new_column_is_version_2(pg_db, broker):
    sql(pg_db, "CREATE TABLE gauges (id int PRIMARY KEY, small int2, count int8, ratio float8, price numeric(10,2),"
               " ok bool, name text NOT NULL, blob bytea, at timestamptz, local timestamp, day date, doc jsonb);"
               "INSERT INTO gauges VALUES (1, 7, 9000000000, 0.5, 12.30, true, 'ann', '\\x00ff',"
               " '2024-01-01 10:00:00.25+02', '2024-01-01 10:00:00', '2024-02-29', '{\"a\": 1}')")
    run = Running(pg_db, broker, ["gauges"], schema_registry=broker.console_url)
    run.wait_streaming(pg_db)
    sql(pg_db, "INSERT INTO gauges (id, name) VALUES (2, 'bob')")
    sql(pg_db, "UPDATE gauges SET count = count + 1, ratio = 'NaN' WHERE id = 1")
    sql(pg_db, "DELETE FROM gauges WHERE id = 2")
    sql(pg_db, "ALTER TABLE gauges ADD COLUMN note text DEFAULT 'x'")
    sql(pg_db, "INSERT INTO gauges (id, name, day) VALUES (3, 'cy', '1969-12-31')")
    caught_up(pg_db)
    run.close()

    topic = "shop.public.gauges"
    registry = SchemaRegistryClient({"url": broker.console_url})
    assert registry.get_versions(f"{topic}-value") == [1, 2] and registry.get_versions(f"{topic}-key") == [1]
    first, second = (registry.get_version(f"{topic}-value", v).schema_id for v in (1, 2))
    records = decoded(broker, topic)
    events = in_order(records)
    assert [(e["op"], (e["after"] or e["before"])["id"]) for e in events] == [
        ("r", 1), ("c", 2), ("u", 1), ("d", 2), ("c", 3)]
    nothing = dict.fromkeys(["small", "count", "ratio", "price", "ok", "blob", "at", "local", "day", "doc"])
    ann = {"id": 1, "small": 7, "count": 9000000000, "ratio": 0.5, "price": "12.30", "ok": True, "name": "ann",
           "blob": b"\x00\xff", "at": datetime(2024, 1, 1, 8, 0, 0, 250000, tzinfo=UTC),
           "local": datetime(2024, 1, 1, 10, tzinfo=UTC), "day": date(2024, 2, 29), "doc": '{"a": 1}'}
    r1, c2, u1, d2, c3 = events
    assert (r1["before"], r1["after"]) == (None, ann)
    assert (c2["before"], c2["after"]) == (None, {**nothing, "id": 2, "name": "bob"})
    assert u1["before"] is None and u1["after"]["count"] == 9000000001 and u1["after"]["ratio"] != u1["after"]["ratio"]
    assert {**u1["after"], "ratio": None} == {**ann, "count": 9000000001, "ratio": None}
    assert d2["before"] == {**nothing, "id": 2, "name": None} and d2["after"] is None   # only the key is sent
    assert c3["after"] == {**nothing, "id": 3, "name": "cy", "day": date(1969, 12, 31), "note": "x"}
    assert r1["source"]["snapshot"] == "last" and c2["source"]["table"] == "gauges"
    assert all(isinstance(e["ts_ms"], int) and isinstance(e["source"]["lsn"], int) for e in events)
    # the key record is the primary key; a delete's tombstone has its key; ids follow the versions
    assert [(key, schema_id) for key, value, schema_id in records if value is None] == [({"id": 2}, None)]
    ids = {value["after"]["id"] if value["after"] else value["before"]["id"]: schema_id
           for _, value, schema_id in records if value is not None and value["op"] in ("r", "c")}
    assert ids == {1: first, 2: first, 3: second}
    assert all(key == {"id": (value["after"] or value["before"])["id"]} for key, value, _ in records if value)


def test_a_change_the_registry_refuses_stops_the_connector_before_it(pg_db, broker):
    sql(pg_db, "CREATE TABLE ledgers (id int PRIMARY KEY, qty int)")
    options = {"schema_registry": broker.console_url, "positions_topic": "ledgers-positions"}  # one broker per module
    run = Running(pg_db, broker, ["ledgers"], **options)
    run.wait_streaming(pg_db)
    sql(pg_db, "INSERT INTO ledgers VALUES (1, 5)")
    caught_up(pg_db)
    sql(pg_db, "ALTER TABLE ledgers ALTER COLUMN qty TYPE text; INSERT INTO ledgers VALUES (2, 'lots')")
    written = sql(pg_db, "SELECT pg_current_wal_lsn()")[0][0]
    wait_for(lambda: run.error is not None, what="the connector to stop")
    run.thread.join(30)
    error = str(run.error)
    assert isinstance(run.error, CdcError) and "\n" not in error
    assert error.startswith("table public.ledgers: the schema registry refuses") and "shop.public.ledgers-value" in error
    assert "409" in error
    assert sql(pg_db, "SELECT confirmed_flush_lsn < %s FROM pg_replication_slots", (written,)) == [(True,)]

    topic = "shop.public.ledgers"
    assert [v["after"] for v in in_order(decoded(broker, topic))] == [{"id": 1, "qty": 5}]
    SchemaRegistryClient({"url": broker.console_url}).set_compatibility(f"{topic}-value", "NONE")
    again = Running(pg_db, broker, ["ledgers"], **options)
    caught_up(pg_db)
    again.close()
    assert [v["after"] for v in in_order(decoded(broker, topic))] == [{"id": 1, "qty": 5}, {"id": 2, "qty": "lots"}]


def test_sqlite_rows_in_avro_by_declared_type(broker, tmp_path):
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR(20), price REAL, img BLOB, qty NUMERIC);"
                  "INSERT INTO items VALUES (1, 'pen', 1.5, x'00ff', 3)")
    run = InThread(SqliteConnector(path, ["items"], "lite", broker.bootstrap, log=lambda _: None,
                                   positions_topic="lite-positions", schema_registry=broker.console_url))
    run.wait(lambda: len(read_topic(broker.bootstrap, "lite.main.items", False, False)) == 1, what="the snapshot")
    query(path, "INSERT INTO items VALUES (2, 'ink', 2, NULL, 0.5)")
    query(path, "UPDATE items SET price = 9.75 WHERE id = 1")
    query(path, "DELETE FROM items WHERE id = 2")
    run.wait(lambda: drained(path), what="the changes")
    run.close()

    pen = {"id": 1, "name": "pen", "price": 1.5, "img": b"\x00\xff", "qty": "3"}
    ink = {"id": 2, "name": "ink", "price": 2.0, "img": None, "qty": "0.5"}
    records = decoded(broker, "lite.main.items")
    assert [(value["op"], value["before"], value["after"]) for value in in_order(records)] == [
        ("r", None, pen), ("c", None, ink), ("u", pen, {**pen, "price": 9.75}), ("d", ink, None)]
    assert sorted(key["id"] for key, _, _ in records) == [1, 1, 2, 2, 2]   # the delete's tombstone too
    assert all(key == {"id": (value["after"] or value["before"])["id"]} for key, value, _ in records if value)
