"""Bad input gets one clear line and a non-zero exit; a broker outage is waited out, losing nothing."""
import re
import socket
import subprocess
import sys
import time

from headwater.testing import BrokerProcess, PostgresServer

from .harness import ConnectorProcess, Running, caught_up, slot_active, sql
from .topics import changes, read_topic, wait_for


def cdc(*args):
    return subprocess.run([sys.executable, "-m", "headwater", "cdc", *args], capture_output=True, text=True,
                           timeout=120)


def assert_clear_error(result, *fragments):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    error = [line for line in result.stderr.splitlines() if line.startswith("headwater: error:")]
    assert len(error) == 1, result.stderr
    for fragment in fragments:
        assert fragment in error[0], error[0]


def postgres_args(dsn, broker, tables="acct"):
    return ("postgres", "--dsn", dsn, "--tables", tables, "--topic-prefix", "shop",
            "--bootstrap-server", broker.bootstrap)


def test_wrong_dsn(broker):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nothing_there = s.getsockname()[1]
    result = cdc(*postgres_args(f"host=127.0.0.1 port={nothing_there} user=postgres dbname=postgres", broker))
    assert_clear_error(result, "cannot connect to PostgreSQL", str(nothing_there))


def test_missing_table(pg_db, broker):
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY)")
    result = cdc(*postgres_args(pg_db, broker, tables="acct,public.nope"))
    assert_clear_error(result, "table public.nope does not exist")


def test_wal_level_not_logical(broker):
    server = PostgresServer(wal_level="replica")
    try:
        result = cdc(*postgres_args(server.dsn, broker))
    finally:
        server.stop()
    assert_clear_error(result, "wal_level is 'replica'", "wal_level = logical", "restart PostgreSQL")


def test_slot_already_in_use(pg_db, broker):
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY)")
    run = Running(pg_db, broker, ["acct"])
    run.wait_streaming(pg_db)
    try:
        result = cdc(*postgres_args(pg_db, broker))
    finally:
        run.close()
    assert_clear_error(result, "replication slot 'headwater' is in use")


def test_broker_down_is_waited_out_without_losing_position(pg_db, tmp_path):
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY, v int)")
    broker = BrokerProcess(tmp_path / "data", "--num-partitions", "3").start()
    broker.stop()  # keeps its port: the connector starts against a broker that is down
    connector = ConnectorProcess(*postgres_args(pg_db, broker), "--heartbeat-interval", "0.5",
                                 log_path=tmp_path / "connector.log").start()
    wait_for(lambda: "waiting for the broker" in connector.log(), what="the connector to wait for the broker")
    assert connector.proc.poll() is None
    broker.start()
    wait_for(lambda: slot_active(pg_db), what="the stream")
    sql(pg_db, "INSERT INTO acct SELECT g, 0 FROM generate_series(1, 100) g")
    caught_up(pg_db)

    broker.stop()
    sql(pg_db, "INSERT INTO acct SELECT g, 1 FROM generate_series(101, 200) g")
    unconfirmed = sql(pg_db, "SELECT pg_current_wal_lsn()")[0][0]
    time.sleep(2)
    assert sql(pg_db, "SELECT confirmed_flush_lsn < %s FROM pg_replication_slots", (unconfirmed,)) == [(True,)]
    assert connector.proc.poll() is None, connector.log()
    broker.start()
    caught_up(pg_db)
    assert connector.stop() == 143, connector.log()  # SIGTERM: stopped cleanly
    broker.stop()

    broker.start()
    try:
        events = changes(read_topic(broker.bootstrap, "shop.public.acct"))
    finally:
        broker.stop()
    assert sorted({e["after"]["id"] for e in events if e["op"] == "c"}) == list(range(1, 201))


def test_database_crash_is_waited_out_without_losing_changes(postgres, pg_db, broker, tmp_path):
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY, v int)")
    connector = ConnectorProcess(*postgres_args(pg_db, broker), "--heartbeat-interval", "0.5",
                                 log_path=tmp_path / "connector.log").start()
    wait_for(lambda: slot_active(pg_db), what="the stream")
    sql(pg_db, "INSERT INTO acct SELECT g, 0 FROM generate_series(1, 100) g")
    postgres.crash_and_restart()
    sql(pg_db, "INSERT INTO acct SELECT g, 1 FROM generate_series(101, 200) g")
    caught_up(pg_db)
    assert connector.stop() == 143, connector.log()  # SIGTERM: stopped cleanly
    assert "restarting from the last acknowledged position" in connector.log()
    events = changes(read_topic(broker.bootstrap, "shop.public.acct"))
    assert sorted({e["after"]["id"] for e in events if e["op"] == "c"}) == list(range(1, 201))


def test_stop_in_a_snapshot_the_broker_stalls_is_prompt_and_the_next_start_takes_it_again(pg_db, tmp_path):
    rows = 150_000   # more than the producer's queue holds (100,000): the snapshot blocks on it
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY, v int)")
    sql(pg_db, f"INSERT INTO acct SELECT g, 0 FROM generate_series(1, {rows}) g")
    broker = BrokerProcess(tmp_path / "data", "--num-partitions", "3").start()
    log_path = tmp_path / "connector.log"
    connector = ConnectorProcess(*postgres_args(pg_db, broker), "--status-interval", "0.2", log_path=log_path).start()
    try:
        wait_for(lambda: re.search(r"snapshotted [1-9]", connector.log()), what="the snapshot under way")
        broker.kill()
        time.sleep(1)   # the producer's queue fills, or the snapshot waits for its acknowledgements
        assert connector.proc.poll() is None, connector.log()
        assert connector.stop() == 143, connector.log()   # SIGTERM: heard within the 60 s of stop()
    finally:
        if connector.proc.poll() is None:
            connector.kill()
    assert "Traceback" not in connector.log()

    broker.start()
    try:
        again = ConnectorProcess(*postgres_args(pg_db, broker), log_path=tmp_path / "again.log").start()
        wait_for(lambda: slot_active(pg_db), timeout=120, what="the new snapshot and the stream")
        assert again.stop() == 143, again.log()
        ids = {e["after"]["id"] for e in changes(read_topic(broker.bootstrap, "shop.public.acct")) if e["op"] == "r"}
    finally:
        broker.stop()
    assert ids == set(range(1, rows + 1))
