"""A real PostgreSQL 15 for the CDC and Spark sink tests: initdb in a temp dir, run as a non-root user."""
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time

import psycopg2
import pytest


def _pg_bin(name):
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError("PostgreSQL server binaries not found; `make system-deps` installs them")
    return found[-1]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """One throw-away cluster; `dsn` connects as superuser `postgres` over loopback TCP."""

    def __init__(self, wal_level="logical"):
        self.dir = tempfile.mkdtemp(prefix="headwater-pg-")
        self.port = _free_port()
        self.dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        # PostgreSQL refuses to run as root: hand the directory to the `postgres` user.
        self._as_user = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        data = os.path.join(self.dir, "data")
        self._run(_pg_bin("initdb"), "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        with open(os.path.join(data, "postgresql.conf"), "a") as conf:
            conf.write(
                f"listen_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.dir}'\nwal_level = {wal_level}\n"
                "max_replication_slots = 20\nmax_wal_senders = 20\n"
                "fsync = off\nshared_buffers = 32MB\n"
            )
        self.data = data
        self.start()

    def _run(self, *cmd):
        subprocess.run(self._as_user + list(cmd), check=True, stdout=subprocess.DEVNULL)

    def _wait_ready(self):
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg2.connect(self.dsn).close()
                return
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def connect(self, autocommit=True):
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = autocommit
        return conn

    def execute(self, statement, params=None):
        return sql(self.dsn, statement, params)

    def start(self):
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-l", os.path.join(self.dir, "log"), "-w", "start")
        self._wait_ready()

    def halt(self):
        """Immediate shutdown (no checkpoint, like a crash); `start` brings it back on the same port."""
        self._run(_pg_bin("pg_ctl"), "-D", self.data, "-m", "immediate", "-w", "stop")

    def crash_and_restart(self):
        self.halt()
        self.start()

    def stop(self):
        self.halt()
        shutil.rmtree(self.dir, ignore_errors=True)


def sql(dsn, statement, params=None):
    """Run one statement in autocommit; its rows, or None."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return cur.fetchall() if cur.description else None
    finally:
        conn.close()


@pytest.fixture(scope="session")
def postgres():
    server = PostgresServer()
    yield server
    server.stop()


@pytest.fixture
def pg_db(postgres):
    """A fresh database per test, so slots/publications/tables never collide between tests."""
    name = f"t{os.getpid()}_{time.monotonic_ns()}"
    postgres.execute(f"CREATE DATABASE {name}")
    dsn = postgres.dsn.replace("dbname=postgres", f"dbname={name}")
    yield dsn
    # Slots pin the database; drop them first (a killed connector may have left one active).
    postgres.execute("SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                     "WHERE database = %s AND active_pid IS NOT NULL", (name,))
    time.sleep(0.2)
    postgres.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                     "WHERE database = %s", (name,))
    postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")
