"""The `headwater` command against a broker that is down, and against a port that speaks TLS
or SASL to a plaintext client: real CLI subprocesses, real signals.

Long-running commands (cdc, events relay, push, pipelines run) wait with one line, keep their
client count, print no flood of client log lines and stop on the first SIGINT or SIGTERM
with 130 or 143 and their progress saved. One-shot commands fail with one message naming
the address, and a TLS or SASL listener gets the hint of what to pass.
"""
from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from headwater.testing import BrokerProcess, sql, wait_until

from tests.support.cdc_topics import changes, read_topic
from tests.support.events_topic import read_topic as read_events, topic_end

PAST_THE_OLD_DEADLINE = 16  # seconds: the relay used to give up (with a traceback) after 15
EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


def closed_port() -> int:
    """A loopback port nobody listens at."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def headwater(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, timeout=timeout)


def start(log: Path, *args: str) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "headwater", *args], stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def shop_db(path: Path) -> str:
    conn = sqlite3.connect(path)
    conn.executescript("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO items VALUES (1, 'pen');")
    conn.close()
    return str(path)


def insert(path: str, row_id: int, name: str) -> None:
    conn = sqlite3.connect(path, timeout=30)
    conn.execute("INSERT INTO items VALUES (?, ?)", (row_id, name))
    conn.commit()
    conn.close()


def long_running(tmp_path: Path, bootstrap: str) -> dict[str, list[str]]:
    tmp_path.mkdir()
    store = tmp_path / "events.db"
    return {"cdc sqlite": ["cdc", "sqlite", "--db", shop_db(tmp_path / "shop.db"), "--tables", "items",
                           "--bootstrap-server", bootstrap],
            "events relay": ["events", "relay", "--store", str(store), "--topic", "carts", "--bootstrap-server", bootstrap],
            "push": ["push", "carts", "http://127.0.0.1:9/hook", "--bootstrap-server", bootstrap],
            "pipelines run": ["pipelines", "run", "windows", "--output", str(tmp_path / "out"),
                              "--bootstrap-server", bootstrap]}


def test_long_running_commands_wait_quietly_and_stop_on_the_first_signal(tmp_path):
    """Each command runs twice side by side, one of the pair stopped by SIGINT and one by SIGTERM:
    both sit out the old deadline in the same wait."""
    bootstrap = f"127.0.0.1:{closed_port()}"
    procs = {(sig, name): (start(tmp_path / f"{name} {sig.name}.log", *argv), tmp_path / f"{name} {sig.name}.log")
             for sig in EXIT_STATUS for name, argv in long_running(tmp_path / sig.name, bootstrap).items()}
    try:
        for name, (proc, log) in procs.items():
            wait_until(lambda: f"waiting for the broker at {bootstrap}" in log.read_text(), what=f"{name} to wait")
        first = {sig: threads(procs[sig, "cdc sqlite"][0].pid) for sig in EXIT_STATUS}
        time.sleep(PAST_THE_OLD_DEADLINE)  # many retries later
        assert all(proc.poll() is None for proc, _ in procs.values()), {n: l.read_text() for n, (_, l) in procs.items()}
        for sig in EXIT_STATUS:
            later = threads(procs[sig, "cdc sqlite"][0].pid)
            assert later <= first[sig] + 2 and later < 20, (first[sig], later)  # one set of clients, reused
        for (sig, _), (proc, _) in procs.items():
            proc.send_signal(sig)
        for (sig, name), (proc, log) in procs.items():
            assert proc.wait(60) == EXIT_STATUS[sig], (sig, name, log.read_text())
            output = log.read_text()
            assert "Traceback" not in output, (name, output)
            assert len(output.splitlines()) < 20, (name, output)  # one waiting line, each client line once
            assert output.count("waiting for the broker") == 1, (name, output)
    finally:
        for proc, _ in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_cdc_stopped_while_the_broker_is_down_ships_each_change_once_later(tmp_path):
    """A change made while the broker was down and the connector stopped (SIGINT) is shipped
    after a restart against a live broker, once; stopping there (SIGTERM) saves the position:
    the next start ships only what is new."""
    db = shop_db(tmp_path / "shop.db")
    log = tmp_path / "cdc.log"
    down = f"127.0.0.1:{closed_port()}"
    connector = start(log, "cdc", "sqlite", "--db", db, "--tables", "items", "--bootstrap-server", down)
    wait_until(lambda: "waiting for the broker" in log.read_text(), what="the connector to wait")
    insert(db, 2, "ink")
    connector.send_signal(signal.SIGINT)
    assert connector.wait(60) == 130, log.read_text()

    with BrokerProcess(tmp_path / "data") as broker:
        for row_id, name in ((3, "pad"), (4, "cup")):
            connector = start(log, "cdc", "sqlite", "--db", db, "--tables", "items",
                              "--bootstrap-server", broker.bootstrap)
            wait_until(lambda: drained(db), what="the changelog shipped and trimmed")
            connector.send_signal(signal.SIGTERM)
            assert connector.wait(60) == 143, log.read_text()
            insert(db, row_id, name)  # while no connector runs
        connector = start(log, "cdc", "sqlite", "--db", db, "--tables", "items", "--bootstrap-server", broker.bootstrap)
        wait_until(lambda: drained(db), what="the last change shipped")
        connector.send_signal(signal.SIGTERM)
        assert connector.wait(60) == 143, log.read_text()
        events = changes(read_topic(broker.bootstrap, "shop.main.items"))
    # the snapshot's row, the change made while the broker was down, the two made while stopped: once each
    assert [(e["op"], e["after"]["id"]) for e in events] == [("r", 1), ("c", 2), ("c", 3), ("c", 4)]
    assert "Traceback" not in log.read_text()


def test_cdc_stopping_while_the_broker_is_down_says_so_and_a_second_signal_ends_it(tmp_path):
    """The broker goes away mid-run with a change in flight: the first SIGINT says what waits
    for the broker, the second ends the wait (130); the change keeps its place and is shipped
    once after a restart."""
    db = shop_db(tmp_path / "shop.db")
    log = tmp_path / "cdc.log"
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        connector = start(log, "cdc", "sqlite", "--db", db, "--tables", "items", "--bootstrap-server", broker.bootstrap,
                          "--status-interval", "0.2")
        wait_until(lambda: "acknowledged 1 |" in log.read_text() and drained(db), what="the snapshot shipped")
        broker.stop()
        insert(db, 2, "ink")
        wait_until(lambda: "changelog position 2 |" in log.read_text(), what="the change sent")
        connector.send_signal(signal.SIGINT)
        wait_until(lambda: "events wait for the broker's acknowledgement" in log.read_text(), what="the stop to wait")
        connector.send_signal(signal.SIGINT)
        assert connector.wait(60) == 130, log.read_text()
        assert not drained(db)  # the change is still in the changelog

        broker.start()
        connector = start(log, "cdc", "sqlite", "--db", db, "--tables", "items", "--bootstrap-server", broker.bootstrap)
        wait_until(lambda: drained(db), what="the change shipped")
        connector.send_signal(signal.SIGTERM)
        assert connector.wait(60) == 143, log.read_text()
        events = changes(read_topic(broker.bootstrap, "shop.main.items"))
    finally:
        if connector.poll() is None:
            connector.kill()
        if broker.proc.poll() is None:
            broker.stop()
    assert [(e["op"], e["after"]["id"]) for e in events] == [("r", 1), ("c", 2)]
    assert "Traceback" not in log.read_text()


def test_relay_waits_out_a_broker_that_goes_away_mid_run(tmp_path):
    """Events appended while the broker is away wait (one line) and are published once when it
    is back; SIGTERM then stops the relay (143). It used to give up after 60 s (exit 1)."""
    from headwater.eventsourcing import NewEvent, open_store
    from headwater.eventsourcing.row_formats import decode_value

    store = open_store(str(tmp_path / "events.db"))
    store.append("cart-1", [NewEvent("ItemAdded", {"item": 0})])
    log = tmp_path / "relay.log"
    broker = BrokerProcess(tmp_path / "data").start()
    relay = start(log, "events", "relay", "--store", str(tmp_path / "events.db"), "--topic", "carts", "--partitions",
                  "1", "--bootstrap-server", broker.bootstrap)
    try:
        wait_until(lambda: topic_end(broker.bootstrap, "carts") == 1, what="the first event published")
        broker.stop()
        store.append("cart-1", [NewEvent("ItemAdded", {"item": 1}), NewEvent("ItemAdded", {"item": 2})])
        wait_until(lambda: "events wait for the broker" in log.read_text(), what="the relay to say it waits")
        time.sleep(5)  # more retries: still one line
        assert relay.poll() is None, log.read_text()
        broker.start()
        wait_until(lambda: topic_end(broker.bootstrap, "carts") >= 3, what="the waiting events published")
        relay.send_signal(signal.SIGTERM)
        assert relay.wait(60) == 143, log.read_text()
        positions = [decode_value(value)[0] for _, _, value in read_events(broker.bootstrap, "carts")]
    finally:
        if relay.poll() is None:
            relay.kill()
        if broker.proc.poll() is None:
            broker.stop()
        store.close()
    assert positions == [1, 2, 3]  # each once, in order
    output = log.read_text()
    assert "Traceback" not in output and len(output.splitlines()) < 20, output


def test_cdc_postgres_with_the_broker_down_waits_and_stops_on_sigint(pg_db, tmp_path):
    sql(pg_db, "CREATE TABLE acct (id int PRIMARY KEY, v int)")
    log, down = tmp_path / "cdc.log", f"127.0.0.1:{closed_port()}"
    connector = start(log, "cdc", "postgres", "--dsn", pg_db, "--tables", "acct", "--topic-prefix", "shop",
                      "--bootstrap-server", down)
    try:
        wait_until(lambda: f"waiting for the broker at {down}" in log.read_text(), what="the connector to wait")
        time.sleep(5)  # a few retries
        connector.send_signal(signal.SIGINT)
        assert connector.wait(60) == 130, log.read_text()
    finally:
        if connector.poll() is None:
            connector.kill()
            connector.wait()
    output = log.read_text()
    assert "Traceback" not in output and len(output.splitlines()) < 20, output


def drained(db: str) -> bool:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute("SELECT count(*) FROM _headwater_changelog").fetchone()[0] == 0
    finally:
        conn.close()


ONE_SHOT = (["topics", "list"], ["groups", "list"], ["transactions", "list"], ["quotas", "describe"],
            ["topics", "describe", "t"], ["groups", "describe", "g"])


def test_one_shot_commands_with_the_broker_down_fail_with_one_message():
    bootstrap = f"127.0.0.1:{closed_port()}"
    for argv in ONE_SHOT:
        result = headwater(*argv, "--bootstrap-server", bootstrap)
        assert result.returncode == 1, (argv, result.stderr)
        assert result.stderr.splitlines() == [f"headwater: error: cannot reach a broker at {bootstrap} "
                                              f"({bootstrap}: Connection refused)"], argv
        assert result.stdout == ""


def test_a_port_that_never_answers_is_given_up_on_after_the_connect_timeout(tmp_path):
    """The timeout is librdkafka's socket.connection.setup.timeout.ms from --command-config."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections complete in the kernel; nobody reads or answers
    properties = tmp_path / "client.properties"
    properties.write_text("socket.connection.setup.timeout.ms=2000\n")
    bootstrap = f"127.0.0.1:{silent.getsockname()[1]}"
    try:
        result = headwater("topics", "list", "--bootstrap-server", bootstrap, "--command-config", str(properties))
    finally:
        silent.close()
    assert result.returncode == 1
    assert result.stderr.splitlines() == [f"headwater: error: cannot reach a broker at {bootstrap} "
                                          f"({bootstrap}: no answer within 2 s)"]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with a PLAINTEXT, an SSL and a SASL_PLAINTEXT listener."""
    base = tmp_path_factory.mktemp("listeners")
    assert headwater("certs", "--out", str(base / "certs")).returncode == 0
    assert headwater("users", "create", "--offline", "--data-dir", str(base / "data"), "alice", "--password", "secret",
                     "--iterations", "4096").returncode == 0
    flags = [a for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT") for a in ("--listener", f"{p}://127.0.0.1:0")]
    with BrokerProcess(base / "data", *flags, "--ssl-certfile", str(base / "certs" / "broker.pem"),
                       "--ssl-keyfile", str(base / "certs" / "broker.key")) as broker:
        yield broker


@pytest.mark.parametrize("listener, hint", [("SSL", "this looks like a TLS listener"),
                                            ("SASL_PLAINTEXT", "this looks like a SASL listener")])
def test_a_plaintext_client_at_a_secured_listener_is_told_what_to_pass(secured, listener, hint):
    bootstrap = f"127.0.0.1:{secured.listeners[listener]}"
    for argv in ONE_SHOT[:4]:
        result = headwater(*argv, "--bootstrap-server", bootstrap)
        assert result.returncode == 1, (argv, result.stderr)
        [line] = result.stderr.splitlines()
        assert line.startswith(f"headwater: error: {bootstrap} answers, but {hint}") and "--command-config" in line


def test_no_hint_where_the_listener_matches(secured):
    plain = headwater("topics", "list", "--bootstrap-server", f"127.0.0.1:{secured.listeners['PLAINTEXT']}")
    assert plain.returncode == 0, plain.stderr
    assert "looks like" not in plain.stderr
