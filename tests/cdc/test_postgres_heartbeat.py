"""PostgreSQL only: the slot keeps moving while the captured tables are idle (see test_contract for the guarantees both connectors share)."""
from tests.support.cdc_harness import Running, caught_up, sql
from tests.support.cdc_topics import read_topic


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
