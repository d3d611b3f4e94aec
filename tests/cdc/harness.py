"""Running connectors (in a thread or as a `headwater cdc` process) and a writer load for the CDC tests."""
import os
import random
import sqlite3
import signal
import subprocess
import sys
import threading

import psycopg2

from headwater.cdc.connector import Connector
from headwater.cdc.postgres import PostgresConnector
from headwater.testing import sql

from .topics import wait_for


def slot_active(dsn, slot="headwater"):
    return sql(dsn, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = %s AND active", (slot,))[0][0] == 1


def caught_up(dsn, slot="headwater", timeout=120):
    """The slot confirmed everything written so far: all changes are in the topics."""
    target = sql(dsn, "SELECT pg_current_wal_lsn()")[0][0]
    wait_for(lambda: sql(dsn, "SELECT confirmed_flush_lsn >= %s FROM pg_replication_slots WHERE slot_name = %s",
                         (target, slot)) == [(True,)], timeout=timeout, what="slot to confirm " + target)


class InThread:
    """A connector running in a thread of the test process; its failure is raised in the test."""

    def __init__(self, connector: Connector):
        self.connector = connector
        self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        try:
            self.connector.run()
        except BaseException as exc:  # handed to the test thread
            self.error = exc

    def wait(self, condition, what):
        def done():
            if self.error:
                raise self.error
            return condition()
        wait_for(done, what=what)

    def close(self):
        self.connector.stop()
        self.thread.join(30)
        if self.error:
            raise self.error


class Running(InThread):
    """A PostgreSQL connector running in a thread of the test process."""

    def __init__(self, dsn, broker, tables, **options):
        options.setdefault("heartbeat_interval", 0.5)
        super().__init__(PostgresConnector(dsn, tables, "shop", broker.bootstrap, log=lambda _: None, **options))

    def wait_streaming(self, dsn):
        self.wait(lambda: slot_active(dsn), what="the stream to start")


class ConnectorProcess:
    """`headwater cdc ...` as a child process, to be SIGKILLed like a crash."""

    def __init__(self, *args, log_path):
        self.args, self.log_path = args, log_path
        self.proc = None

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "headwater", "cdc", *self.args],
                                     stdout=log, stderr=log, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log.close()
        return self

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(60)

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")


class Writer(threading.Thread):
    """Single-row transactions on `acct(id, v)` from one thread, so commit order is known.

    `log` holds (txid, op, id, v) per committed transaction, in commit order; `execute(cur, op,
    id, v)` runs one change, `txid(cur)` says which transaction it was (None if the database
    has no transaction ids)."""

    def __init__(self, connect, execute, txid, first_id, seed=7):
        super().__init__(daemon=True)
        self.connect, self.execute, self.txid = connect, execute, txid
        self.rows = set(range(1, first_id))
        self.next_id, self.version = first_id, first_id
        self.rng = random.Random(seed)
        self.log = []
        self.stopping = threading.Event()

    def run(self):
        conn = self.connect()
        cur = conn.cursor()
        while not self.stopping.is_set():
            self.version += 1
            roll = self.rng.random()
            if roll < 0.4 or len(self.rows) < 10:
                op, key = "c", self.next_id
                self.next_id += 1
            else:
                op, key = ("u" if roll < 0.85 else "d"), self.rng.choice(sorted(self.rows))
            self.execute(cur, op, key, self.version)
            txid = self.txid(cur)
            conn.commit()
            (self.rows.add if op != "d" else self.rows.discard)(key)
            self.log.append((txid, op, key, self.version))
        conn.close()

    def stop(self):
        self.stopping.set()
        self.join(30)


def apply(rows, log):
    """Plain-Python ground truth: {id: v} after applying writer log entries."""
    rows = dict(rows)
    for _, op, key, v in log:
        if op == "d":
            rows.pop(key)
        else:
            rows[key] = v
    return rows


def expected_history(initial, log, deleted_v):
    """Plain-Python ground truth per key: the snapshot read then every logged change, in commit
    order, as (op, v); a delete carries what `deleted_v(last v)` says its event holds."""
    expected = {key: [("r", v)] for key, v in initial.items()}
    last_v = dict(initial)
    for _, op, key, v in log:
        expected.setdefault(key, []).append((op, deleted_v(last_v.get(key)) if op == "d" else v))
        last_v[key] = v
    return expected


def pg_writer(dsn, first_id):
    def execute(cur, op, key, v):
        if op == "c":
            cur.execute("INSERT INTO acct VALUES (%s, %s)", (key, v))
        elif op == "u":
            cur.execute("UPDATE acct SET v = %s WHERE id = %s", (v, key))
        else:
            cur.execute("DELETE FROM acct WHERE id = %s", (key,))

    def txid(cur):
        cur.execute("SELECT txid_current()")
        return cur.fetchone()[0]
    return Writer(lambda: psycopg2.connect(dsn), execute, txid, first_id)


def sqlite_writer(path, first_id):
    def connect():
        conn = sqlite3.connect(path, timeout=30)
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def execute(cur, op, key, v):
        if op == "c":
            cur.execute("INSERT INTO acct VALUES (?, ?)", (key, v))
        elif op == "u":
            cur.execute("UPDATE acct SET v = ? WHERE id = ?", (v, key))
        else:
            cur.execute("DELETE FROM acct WHERE id = ?", (key,))
    return Writer(connect, execute, lambda cur: None, first_id)
