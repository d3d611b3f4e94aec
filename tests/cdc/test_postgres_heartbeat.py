"""No gap, no overlap, nothing lost: snapshot under writes, SIGKILL under load, idle heartbeat."""
import random
import re

from .harness import ConnectorProcess, Running, apply, caught_up, pg_writer, slot_active, sql
from .topics import changes, read_topic, replay, wait_for

PRELOAD = 2000


def make_acct(dsn):
    sql(dsn, f"CREATE TABLE acct (id int PRIMARY KEY, v int); INSERT INTO acct SELECT g, g FROM generate_series(1, {PRELOAD}) g")
    return {i: i for i in range(1, PRELOAD + 1)}


def test_snapshot_meets_stream_under_concurrent_writes(pg_db, broker):
    initial = make_acct(pg_db)
    writer = pg_writer(pg_db, PRELOAD + 1)
    writer.start()
    wait_for(lambda: len(writer.log) >= 30, what="writes before the snapshot")
    run = Running(pg_db, broker, ["acct"])
    run.wait_streaming(pg_db)
    streamed_from = len(writer.log)
    wait_for(lambda: len(writer.log) >= streamed_from + 30, what="writes after the snapshot")
    writer.stop()
    caught_up(pg_db)
    run.close()

    events = changes(read_topic(broker.bootstrap, "shop.public.acct"))
    reads = [e for e in events if e["op"] == "r"]
    stream = [e for e in events if e["op"] != "r"]
    # The snapshot is a prefix of the commit order, the stream is exactly the rest.
    before = writer.log[:len(writer.log) - len(stream)]
    after = writer.log[len(before):]
    assert len(before) >= 30 and len(after) >= 30
    assert [e["source"]["txId"] for e in stream] == [txid for txid, *_ in after]
    assert [(e["op"], (e["after"] or e["before"])["id"]) for e in stream] == [(op, key) for _, op, key, _ in after]
    assert [e["after"]["v"] for e in stream if e["op"] != "d"] == [v for _, op, _, v in after if op != "d"]
    # Every row exactly once, as of the snapshot.
    assert len(reads) == len({e["after"]["id"] for e in reads})
    assert {e["after"]["id"]: e["after"]["v"] for e in reads} == apply(initial, before)
    assert all(e["source"]["lsn"] <= s["source"]["lsn"] for e in reads[:1] for s in stream)


def test_sigkill_under_write_load_loses_nothing(pg_db, broker, tmp_path):
    initial = make_acct(pg_db)
    connector = ConnectorProcess("postgres", "--dsn", pg_db, "--tables", "acct", "--topic-prefix", "shop",
                                 "--bootstrap-server", broker.bootstrap, "--heartbeat-interval", "0.5",
                                 "--status-interval", "0.2", log_path=tmp_path / "connector.log").start()
    wait_for(lambda: slot_active(pg_db), what="the first stream (snapshot done)")
    writer = pg_writer(pg_db, PRELOAD + 1)
    writer.start()
    rng = random.Random(3)
    for _ in range(4):
        wait_for(lambda: slot_active(pg_db), what="the connector to stream again")
        written = len(writer.log)
        wait_for(lambda: len(writer.log) >= written + rng.randint(50, 300), what="more writes")
        connector.kill()
        connector.start()
    writer.stop()
    caught_up(pg_db)
    assert connector.stop() == 0, connector.log()
    status = rf"snapshotted {PRELOAD} rows \| shipped \d+ events \| lsn [0-9A-F]+/[0-9A-F]+ \| confirmed [0-9A-F]+/[0-9A-F]+ \| lag \d+ bytes"
    assert re.search(status, connector.log())  # the first run's status line

    records = read_topic(broker.bootstrap, "shop.public.acct")
    table, history = replay(records)
    source = dict(sql(pg_db, "SELECT id, v FROM acct"))
    assert {key: row["v"] for key, row in table.items()} == source == apply(initial, writer.log)
    # Per key, after dropping redeliveries (same LSN), the changes in commit order, none missing.
    expected = {key: [("r", v)] for key, v in initial.items()}
    for _, op, key, v in writer.log:
        expected.setdefault(key, []).append((op, v if op != "d" else None))
    got = {key: [(op, row["v"]) for op, row in ops] for key, ops in history.items()}
    assert got == expected


def test_heartbeat_advances_the_slot_while_captured_tables_are_idle(pg_db, broker):
    sql(pg_db, "CREATE TABLE captured (id int PRIMARY KEY); CREATE TABLE busy (id int PRIMARY KEY, pad text)")
    run = Running(pg_db, broker, ["captured"], heartbeat_interval=0.2)
    run.wait_streaming(pg_db)
    start = sql(pg_db, "SELECT confirmed_flush_lsn FROM pg_replication_slots")[0][0]
    sql(pg_db, "INSERT INTO busy SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g")
    caught_up(pg_db)  # the slot moved past all of busy's WAL although no event was produced
    run.close()
    assert sql(pg_db, "SELECT confirmed_flush_lsn - %s::pg_lsn > 4000000 FROM pg_replication_slots", (start,)) == [(True,)]
    assert read_topic(broker.bootstrap, "shop.public.captured") == []
