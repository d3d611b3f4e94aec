"""The pgoutput decoder on bytes produced by a real PostgreSQL (pg_logical_slot_get_binary_changes)."""
import base64

import psycopg2
import pytest

from headwater.cdc import pgoutput, pgtypes
from headwater.cdc.pgoutput import Begin, Commit, Delete, Insert, Relation, Truncate, Update


@pytest.fixture
def db(pg_db):
    conn = psycopg2.connect(pg_db, options=pgtypes.SESSION_OPTIONS)
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("CREATE TABLE items (id int PRIMARY KEY, name text, big text)")
    cur.execute("CREATE TABLE full_items (id int PRIMARY KEY, name text)")
    cur.execute("ALTER TABLE full_items REPLICA IDENTITY FULL")
    cur.execute("CREATE PUBLICATION pub FOR TABLE items, full_items")
    cur.execute("SELECT pg_create_logical_replication_slot('s', 'pgoutput')")
    yield cur
    conn.close()


def changes(cur):
    cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
                "'proto_version', '1', 'publication_names', 'pub')")
    return [pgoutput.decode(bytes(data)) for (data,) in cur.fetchall()]


def test_insert_update_delete_in_one_transaction(db):
    db.execute("BEGIN; INSERT INTO items VALUES (1, 'a', NULL); UPDATE items SET name = 'b' WHERE id = 1;"
               "UPDATE items SET id = 2 WHERE id = 1; DELETE FROM items WHERE id = 2; COMMIT")
    msgs = changes(db)
    kinds = [type(m).__name__ for m in msgs]
    assert kinds == ["Begin", "Relation", "Insert", "Update", "Update", "Delete", "Commit"]
    begin, rel, ins, upd, keychange, dele, commit = msgs
    assert isinstance(begin, Begin) and isinstance(commit, Commit)
    assert begin.final_lsn == commit.commit_lsn < commit.end_lsn
    assert (rel.schema, rel.table, rel.replica_identity) == ("public", "items", "d")
    assert [(c.name, c.type_oid, c.is_key) for c in rel.columns] == [
        ("id", 23, True), ("name", 25, False), ("big", 25, False)]
    assert ins.relid == rel.relid and ins.new == ["1", "a", None]
    assert upd.old is None and upd.new == ["1", "b", None]  # key unchanged: no old key sent
    assert keychange.old_kind == "K" and keychange.old == ["1", None, None] and keychange.new == ["2", "b", None]
    assert dele.old_kind == "K" and dele.old == ["2", None, None]


def test_replica_identity_full_sends_whole_old_row(db):
    db.execute("INSERT INTO full_items VALUES (1, 'x')")
    db.execute("UPDATE full_items SET name = 'y'")
    db.execute("DELETE FROM full_items")
    msgs = [m for m in changes(db) if isinstance(m, (Update, Delete))]
    assert msgs[0].old_kind == "O" and msgs[0].old == ["1", "x"] and msgs[0].new == ["1", "y"]
    assert msgs[1].old_kind == "O" and msgs[1].old == ["1", "y"]


def test_unchanged_toast_value_is_marked_not_sent(db):
    big = "".join(chr(0x41 + (i * 7919) % 26) for i in range(200_000))  # incompressible enough to go out of line
    db.execute("ALTER TABLE items ALTER COLUMN big SET STORAGE EXTERNAL")
    db.execute("INSERT INTO items VALUES (1, 'a', %s)", (big,))
    db.execute("UPDATE items SET name = 'b' WHERE id = 1")
    inserts_updates = [m for m in changes(db) if isinstance(m, (Insert, Update))]
    assert inserts_updates[0].new[2] == big
    assert inserts_updates[1].new[:2] == ["1", "b"] and inserts_updates[1].new[2] is pgoutput.UNCHANGED


def test_truncate_lists_every_relation(db):
    db.execute("INSERT INTO items VALUES (1, 'a', NULL)")
    changes(db)
    db.execute("TRUNCATE items, full_items RESTART IDENTITY")
    msgs = changes(db)
    truncate = next(m for m in msgs if isinstance(m, Truncate))
    rels = {m.relid: m.table for m in msgs if isinstance(m, Relation)}
    assert sorted(rels[r] for r in truncate.relids) == ["full_items", "items"]
    assert truncate.restart_identity and not truncate.cascade


def test_relation_message_follows_schema_change(db):
    db.execute("INSERT INTO items VALUES (1, 'a', NULL)")
    db.execute("ALTER TABLE items ADD COLUMN price numeric(10,2)")
    db.execute("INSERT INTO items VALUES (2, 'b', NULL, 9.99)")
    rels = [m for m in changes(db) if isinstance(m, Relation)]
    assert [c.name for c in rels[-1].columns] == ["id", "name", "big", "price"]


def test_values_are_typed_as_json(db):
    db.execute("CREATE TABLE typed (id bigint PRIMARY KEY, flag boolean, amount numeric, ratio float8,"
               " odd float8, created timestamptz, local timestamp, day date, blob bytea, doc jsonb, tags text[])")
    db.execute("ALTER PUBLICATION pub ADD TABLE typed")
    db.execute("INSERT INTO typed VALUES (9007199254740993, true, 12345678901234567890.123456789, 0.1,"
               " 'NaN', '2024-02-29 13:14:15.5+02', '2024-02-29 13:14:15', '2024-02-29', '\\x00ff10',"
               " '{\"a\": [1, 2]}', '{x,y}')")
    rel, ins = [m for m in changes(db) if isinstance(m, (Relation, Insert)) and
                (not isinstance(m, Relation) or m.table == "typed")][-2:]
    row = {c.name: pgtypes.to_json(c.type_oid, v) for c, v in zip(rel.columns, ins.new)}
    assert row == {
        "id": 9007199254740993, "flag": True, "amount": "12345678901234567890.123456789", "ratio": 0.1,
        "odd": "NaN", "created": "2024-02-29T11:14:15.5+00:00", "local": "2024-02-29T13:14:15",
        "day": "2024-02-29", "blob": base64.b64encode(b"\x00\xff\x10").decode(),
        "doc": '{"a": [1, 2]}', "tags": "{x,y}"}
    # the snapshot reads each column as ::text (a boolean is true/false there, t/f in the stream): typed alike
    db.execute("SELECT " + ", ".join(f"{c.name}::text" for c in rel.columns) + " FROM typed")
    assert {c.name: pgtypes.to_json(c.type_oid, v) for c, v in zip(rel.columns, db.fetchone())} == row


def test_truncated_message_is_an_error():
    with pytest.raises(pgoutput.DecodeError):
        pgoutput.decode(b"B\x00\x00")
    with pytest.raises(pgoutput.DecodeError):
        pgoutput.decode(b"Z")


def test_lsn_text_round_trip():
    assert pgoutput.parse_lsn("16/B374D848") == 0x16B374D848
    assert pgoutput.format_lsn(0x16B374D848) == "16/B374D848"


def test_type_message_for_custom_types_and_binary_tuple_data(db):
    db.execute("CREATE TYPE mood AS ENUM ('sad', 'happy'); CREATE TABLE moods (id int PRIMARY KEY, m mood)")
    db.execute("ALTER PUBLICATION pub ADD TABLE moods")
    db.execute("INSERT INTO moods VALUES (7, 'happy')")
    db.execute("SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, "
               "'proto_version', '1', 'publication_names', 'pub', 'binary', 'true')")
    binary = [pgoutput.decode(bytes(d)) for (d,) in db.fetchall()]
    msgs = changes(db)
    typ = next(m for m in msgs if isinstance(m, pgoutput.Type))
    rel = next(m for m in msgs if isinstance(m, Relation))
    assert (typ.schema, typ.name) == ("public", "mood") and rel.columns[1].type_oid == typ.oid
    assert next(m for m in msgs if isinstance(m, Insert)).new == ["7", "happy"]
    # with the binary option PostgreSQL sends each type's binary form ('b'): int4 is 4 bytes big-endian
    assert next(m for m in binary if isinstance(m, Insert)).new == [b"\x00\x00\x00\x07", b"happy"]


def test_insert_row_reads_what_decode_reads_and_declines_the_rest(db):
    """The one-pass insert path against the decoder (ground truth) on a real stream: text and null
    values, converters applied; binary values, other messages and wrong column counts are declined."""
    db.execute("INSERT INTO items VALUES (1, 'a', NULL), (2, 'é \"x\"', repeat('z', 3000))")
    db.execute("UPDATE items SET name = 'c' WHERE id = 1")
    db.execute("SELECT data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL, "
               "'proto_version', '1', 'publication_names', 'pub', 'binary', 'true')")
    binary = [bytes(d) for (d,) in db.fetchall()]
    db.execute("SELECT data FROM pg_logical_slot_get_binary_changes('s', NULL, NULL, "
               "'proto_version', '1', 'publication_names', 'pub')")
    payloads = [bytes(d) for (d,) in db.fetchall()]
    rel = next(m for m in map(pgoutput.decode, payloads) if isinstance(m, Relation))
    columns = [("id", int), ("name", None), ("big", str.upper)]
    inserts = [p for p in payloads if isinstance(pgoutput.decode(p), Insert)]
    assert len(inserts) == 2 and {pgoutput.insert_relid(p) for p in inserts} == {rel.relid}
    for payload in inserts:
        values = pgoutput.decode(payload).new
        expected = {name: None if v is None else (v if f is None else f(v)) for (name, f), v in zip(columns, values)}
        assert pgoutput.insert_row(payload, columns) == expected
    assert pgoutput.insert_row(inserts[1], columns)["big"] == "Z" * 3000
    assert [pgoutput.insert_relid(p) for p in payloads if p not in inserts] == [None] * (len(payloads) - 2)
    assert pgoutput.insert_row(inserts[0], columns[:2]) is None  # not this relation's columns
    binary_insert = next(p for p in binary if pgoutput.insert_relid(p) is not None)
    assert pgoutput.insert_row(binary_insert, columns) is None
    with pytest.raises(pgoutput.DecodeError):
        pgoutput.insert_row(inserts[1][:-5], columns)
