"""The two source databases behind one face, for the connector contract tests: a table
`acct(id, v)` preloaded with rows 1..n (v = id), its connector in-process or as a
`headwater cdc` process, a single-threaded writer, and when the topic has caught up."""
import sqlite3

from headwater.cdc.connector import Connector
from headwater.cdc.postgres import PostgresConnector
from headwater.cdc.sqlite import CHANGELOG, SqliteConnector
from headwater.testing import sql

from .harness import caught_up, pg_writer, slot_active, sqlite_writer
from .topics import wait_for

STATUS_FIELDS = r"\| lsn [0-9A-F]+/[0-9A-F]+ \| confirmed [0-9A-F]+/[0-9A-F]+ \| lag \d+ bytes"


def make_db(path, statements):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.executescript(statements)
    conn.close()


def query(path, statement, params=()):
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        return conn.execute(statement, params).fetchall()
    finally:
        conn.close()


def drained(path):
    """The poller trimmed everything: the broker acknowledged every changelog row."""
    return query(path, f"SELECT count(*) FROM {CHANGELOG}") == [(0,)]


class PostgresSource:
    topic = "shop.public.acct"

    def __init__(self, dsn, broker):
        self.dsn, self.broker = dsn, broker

    def create_acct(self, rows):
        sql(self.dsn, f"CREATE TABLE acct (id int PRIMARY KEY, v int); "
                      f"INSERT INTO acct SELECT g, g FROM generate_series(1, {rows}) g")

    def connector(self) -> Connector:
        return PostgresConnector(self.dsn, ["acct"], "shop", self.broker.bootstrap, heartbeat_interval=0.5,
                                 log=lambda _: None)

    def cli_args(self):
        return ("postgres", "--dsn", self.dsn, "--tables", "acct", "--topic-prefix", "shop",
                "--bootstrap-server", self.broker.bootstrap, "--heartbeat-interval", "0.5", "--status-interval", "0.2")

    def streaming(self):
        """The snapshot is shipped and changes flow."""
        return slot_active(self.dsn)

    def caught_up(self):
        caught_up(self.dsn)

    def rows(self):
        return dict(sql(self.dsn, "SELECT id, v FROM acct"))

    def writer(self, first_id):
        return pg_writer(self.dsn, first_id)

    @staticmethod
    def status_line(snapshotted):
        """A pattern of the status line; `snapshotted` a pattern of the snapshot's row count."""
        return rf"snapshotted {snapshotted} rows \| shipped \d+ events {STATUS_FIELDS}"

    @staticmethod
    def deleted_v(_last_v):
        """What a delete event's `before` holds for v: the default replica identity sends the key only."""
        return None


class SqliteSource:
    topic = "shop.main.acct"

    def __init__(self, path, broker):
        self.path, self.broker = str(path), broker

    def create_acct(self, rows):
        make_db(self.path, "CREATE TABLE acct (id INTEGER PRIMARY KEY, v INTEGER);"
                           f"WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < {rows}) "
                           "INSERT INTO acct SELECT i, i FROM g;")

    def connector(self) -> Connector:
        return SqliteConnector(self.path, ["acct"], "shop", self.broker.bootstrap, log=lambda _: None)

    def cli_args(self):
        return ("sqlite", "--db", self.path, "--tables", "acct", "--topic-prefix", "shop",
                "--bootstrap-server", self.broker.bootstrap, "--status-interval", "0.2")

    def streaming(self):
        """The triggers are in and the table's rows entered the changelog with them."""
        return query(self.path, "SELECT count(*) FROM sqlite_master WHERE name = ?", (CHANGELOG,)) == [(1,)]

    def caught_up(self):
        wait_for(lambda: drained(self.path), what="changelog trimmed")

    def rows(self):
        return dict(query(self.path, "SELECT id, v FROM acct"))

    def writer(self, first_id):
        return sqlite_writer(self.path, first_id)

    @staticmethod
    def status_line(_snapshotted):
        """A pattern of the status line (the snapshot rows are in the changelog: no count of their own)."""
        return r"shipped \d+ events \| changelog position \d+ \| acknowledged \d+ \| lag \d+ rows"

    @staticmethod
    def deleted_v(last_v):
        """The trigger's before-image is the whole old row."""
        return last_v


def source_for(request, broker, tmp_path):
    """The source `request.param` names, shipping to `broker`: "postgres" (on a fresh database of
    the suite's server) or "sqlite"."""
    if request.param == "postgres":
        return PostgresSource(request.getfixturevalue("pg_db"), broker)
    return SqliteSource(tmp_path / "acct.db", broker)
