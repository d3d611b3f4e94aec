"""PostgreSQL connector: publication + pgoutput slot, exported-snapshot read, then the stream.

Start-up order decides "no gap, no overlap": the slot is created with an exported snapshot;
the snapshot reads the tables as of exactly the slot's consistent point (op `r`), and the
stream then delivers every transaction committed after that point.
"""
from dataclasses import dataclass
import re
import select
import time

import psycopg2
import psycopg2.extras
from psycopg2 import sql

from . import CdcError, SourceUnavailable, pgoutput, pgtypes
from .envelope import UNAVAILABLE, Source, row_events, topic_name, truncate_event
from .shipper import PositionStore, Shipper, new_producer

SNAPSHOT_MODES = ("initial", "never", "when_needed")
_PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in Unix milliseconds


@dataclass
class Table:
    schema: str
    name: str
    columns: list  # [(name, type_oid)] in column order
    key: list  # primary key column names


@dataclass
class Status:
    snapshotted: int = 0
    shipped: int = 0
    lsn: int = 0  # last change received from the slot
    confirmed: int = 0  # flush LSN confirmed to PostgreSQL
    server_lsn: int = 0  # the server's WAL end, from its keepalives

    def line(self):
        lag = max(0, self.server_lsn - self.confirmed)
        return (f"snapshotted {self.snapshotted} rows | shipped {self.shipped} events | "
                f"lsn {pgoutput.format_lsn(self.lsn)} | confirmed {pgoutput.format_lsn(self.confirmed)} | "
                f"lag {lag} bytes")


def connect(dsn, replication=False):
    try:
        conn = psycopg2.connect(
            dsn, options=pgtypes.SESSION_OPTIONS,
            connection_factory=psycopg2.extras.LogicalReplicationConnection if replication else None)
    except psycopg2.OperationalError as exc:
        raise SourceUnavailable(f"cannot connect to PostgreSQL: {str(exc).strip().splitlines()[0]}") from None
    if not replication:  # a replication connection is always in autocommit
        conn.autocommit = True
    return conn


def check_wal_level(conn):
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        level = cur.fetchone()[0]
    if level != "logical":
        raise CdcError(f"wal_level is '{level}' but CDC needs 'logical': set wal_level = logical in "
                       "postgresql.conf (or run ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL")


def parse_table(name):
    schema, _, table = name.rpartition(".")
    return schema or "public", table


def load_table(conn, schema, name):
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')", (schema, name))
        row = cur.fetchone()
        if row is None:
            raise CdcError(f"table {schema}.{name} does not exist in database {conn.info.dbname}")
        return Table(schema, name, _columns(cur, row[0]), _primary_key(cur, row[0]))


def _columns(cur, relid):
    cur.execute("SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", (relid,))
    return [(name, oid) for name, oid in cur.fetchall()]


def _primary_key(cur, relid):
    cur.execute("SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, pos) "
                "JOIN pg_attribute a ON a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary "
                "AND a.attrelid = i.indrelid ORDER BY k.pos", (relid,))
    return [name for (name,) in cur.fetchall()]


def _row(columns, values):
    row = {}
    for (name, oid), value in zip(columns, values):
        if value is pgoutput.UNCHANGED:
            row[name] = UNAVAILABLE
        elif isinstance(value, bytes):  # binary tuple data: we never ask for it, keep it lossless
            row[name] = pgtypes.to_json(pgtypes.BYTEA, "\\x" + value.hex())
        else:
            row[name] = pgtypes.to_json(oid, value)
    return row


class _Transaction:
    def __init__(self, begin, batch, skip):
        self.xid = begin.xid
        self.ts_ms = begin.commit_ts_us // 1000 + _PG_EPOCH_MS
        self.batch = batch
        self.skip = skip  # already delivered before a crash: PostgreSQL may send it again


class PostgresConnector:
    """Capture `tables` into `<topic_prefix>.<schema>.<table>` topics on the broker at
    `bootstrap`. `producer` may be a confluent_kafka.Producer of your own (security settings,
    another cluster); it must keep acks=all and idempotence."""

    def __init__(self, dsn, tables, topic_prefix, bootstrap, *, slot="headwater",
                 publication="headwater", snapshot_mode="initial",
                 positions_topic="headwater-cdc-positions", heartbeat_interval=5.0,
                 slot_wait=5.0, producer=None, log=print):
        if snapshot_mode not in SNAPSHOT_MODES:
            raise CdcError(f"unknown snapshot mode {snapshot_mode!r}; use one of {', '.join(SNAPSHOT_MODES)}")
        if not re.fullmatch(r"[a-z0-9_]+", slot):
            raise CdcError(f"slot name {slot!r} may only contain lower-case letters, digits and '_'")
        if not tables:
            raise CdcError("no tables given")
        self.dsn, self.table_names, self.prefix = dsn, tables, topic_prefix
        self.slot, self.publication, self.snapshot_mode = slot, publication, snapshot_mode
        self.heartbeat_interval, self.slot_wait = heartbeat_interval, slot_wait
        self.positions = PositionStore(bootstrap, positions_topic, f"postgresql:{slot}")
        self.bootstrap, self._producer, self.log = bootstrap, producer, log
        self.status = Status()

    # -- start-up --------------------------------------------------------------------------

    def _prepare(self, conn):
        check_wal_level(conn)
        tables = [load_table(conn, *parse_table(name)) for name in self.table_names]
        idents = sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,))
            verb = "ALTER PUBLICATION {} SET TABLE {}" if cur.fetchone() else "CREATE PUBLICATION {} FOR TABLE {}"
            cur.execute(sql.SQL(verb).format(sql.Identifier(self.publication), idents))
        return tables

    def _slot(self, conn):
        """(exists, active_pid) of our slot."""
        with conn.cursor() as cur:
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            row = cur.fetchone()
        return (row is not None, row[0] if row else None)

    def _plan(self, stored, slot_exists):
        """Whether to snapshot; raises if a resume would silently lose changes."""
        ready = stored is not None and stored.get("snapshot_done")
        if self.snapshot_mode == "never":
            return False
        if not ready:
            return True  # first run, or a snapshot that never finished: (re)do it
        if slot_exists:
            return False
        if self.snapshot_mode == "when_needed":
            return True
        raise CdcError(f"replication slot {self.slot!r} is gone but a position is stored: changes since "
                       "then are lost; rerun with --snapshot-mode when_needed to take a new snapshot")

    # -- snapshot --------------------------------------------------------------------------

    def _snapshot(self, repl, tables, shipper, db):
        with repl.cursor() as cur:
            cur.execute(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
            _, consistent_point, snapshot_name, _ = cur.fetchone()
        lsn = pgoutput.parse_lsn(consistent_point)
        snap = connect(self.dsn)
        snap.autocommit = False
        snap.set_session(isolation_level="REPEATABLE READ", readonly=True)
        batch = shipper.tracker.open()
        try:
            with snap.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                cur.execute("SELECT txid_snapshot_xmin(txid_current_snapshot()), "
                            "(extract(epoch FROM now()) * 1000)::bigint")
                xid, ts_ms = cur.fetchone()
            previous = None
            for table, values in self._snapshot_rows(snap, tables):
                if previous is not None:
                    self._send_read(shipper, batch, db, lsn, xid, ts_ms, *previous, "true")
                previous = (table, values)
            if previous is not None:
                self._send_read(shipper, batch, db, lsn, xid, ts_ms, *previous, "last")
        finally:
            snap.rollback()
            snap.close()
        shipper.tracker.close(batch, lsn)
        return lsn

    @staticmethod
    def _snapshot_rows(snap, tables):
        for table in tables:
            with snap.cursor(name="headwater_snapshot") as cur:
                cur.itersize = 5000
                cols = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c, _ in table.columns)
                cur.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(table.schema, table.name)))
                for values in cur:
                    yield table, values

    def _send_read(self, shipper, batch, db, lsn, xid, ts_ms, table, values, marker):
        source = Source("postgresql", db, table.schema, table.name, lsn, xid, ts_ms, marker)
        topic = topic_name(self.prefix, table.schema, table.name)
        for event in row_events(topic, table.key, "r", None, _row(table.columns, values), source):
            shipper.send(event, batch)
        self.status.snapshotted += 1
        if self.status.snapshotted % 1000 == 0:
            shipper.poll(0)  # run delivery callbacks as we go
            self.report(shipper)

    def report(self, shipper):
        """The status line, at most every status interval."""
        now = time.monotonic()
        if self._on_status and now - self._last_status >= self._status_interval:
            self.status.shipped = shipper.delivered
            self._on_status(self.status.line())
            self._last_status = now

    def _ready(self, shipper, lsn):
        """Store "snapshot done" before streaming: a crash after this resumes the stream; a crash
        before it takes the snapshot again (a half-shipped snapshot never meets the stream)."""
        stored = []
        shipper.flush(None)
        self.positions.save(shipper, {"lsn": lsn, "snapshot_done": True}, lambda: stored.append(True))
        while not stored:
            shipper.flush(1)

    # -- stream ----------------------------------------------------------------------------

    def run(self, should_stop=lambda: False, status_interval=2.0, on_status=None):
        self._on_status, self._status_interval, self._last_status = on_status, status_interval, time.monotonic()
        conn = connect(self.dsn)
        db = conn.info.dbname
        tables = self._prepare(conn)
        stored = self.positions.load(wait_log=self.log)
        exists, active_pid = self._slot(conn)
        deadline = time.monotonic() + self.slot_wait
        while active_pid is not None and time.monotonic() < deadline:
            time.sleep(0.2)  # a crashed predecessor's walsender lets go of the slot shortly
            exists, active_pid = self._slot(conn)
        if active_pid is not None:
            raise CdcError(f"replication slot {self.slot!r} is in use by another connection (PID {active_pid})")
        snapshot = self._plan(stored, exists)
        repl = connect(self.dsn, replication=True)
        cur = repl.cursor()
        shipper = Shipper(self._producer or new_producer(self.bootstrap), on_wait=_keepalive(cur))
        resume_lsn = stored["lsn"] if stored and not snapshot else 0
        if snapshot:
            if exists:
                conn.cursor().execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            self._ready(shipper, self._snapshot(repl, tables, shipper, db))
        elif not exists:
            cur.create_replication_slot(self.slot, output_plugin="pgoutput")
            self._ready(shipper, 0)
        try:
            cur.start_replication(slot_name=self.slot, decode=False, start_lsn=resume_lsn,
                                  options={"proto_version": "1", "publication_names": self.publication})
        except psycopg2.errors.ObjectInUse as exc:
            raise CdcError(f"replication slot {self.slot!r} is in use: {exc.pgerror.strip().splitlines()[0]}") from None
        stream = _Stream(self, conn, cur, shipper, db, resume_lsn)
        try:
            stream.loop(should_stop)
        finally:
            repl.close()
            conn.close()


def _keepalive(cur):
    """While we wait on the broker, tell the walsender once a second that we are alive
    (no position moves), or it drops us after wal_sender_timeout."""
    last = [0.0]

    def keepalive():
        if time.monotonic() - last[0] >= 1 and not cur.closed:
            last[0] = time.monotonic()
            try:
                cur.send_feedback(force=True)
            except psycopg2.ProgrammingError:
                pass  # still taking the snapshot: no stream to keep alive yet
    return keepalive


class _Stream:
    """The streaming loop: decode, produce, and confirm only what the broker holds."""

    def __init__(self, connector, conn, cur, shipper, db, resume_lsn):
        self.c, self.conn, self.cur, self.shipper, self.db = connector, conn, cur, shipper, db
        self.resume_lsn = resume_lsn
        self.relations = {}
        self.txn = None
        self.to_store = None

    def loop(self, should_stop):
        last_save = last_heartbeat = time.monotonic()
        received = 0
        while not should_stop():
            try:
                msg = self.cur.read_message()
            except psycopg2.DatabaseError as exc:  # libpq reports a dropped stream this way
                raise psycopg2.OperationalError(f"replication stream lost: {exc}") from exc
            if msg is not None:
                self.handle(msg.data_start, pgoutput.decode(msg.payload))
                received += 1
                if received % 500:
                    continue
            else:
                select.select([self.cur.connection], [], [], 0.05)
            now = time.monotonic()
            self.c.status.server_lsn = max(self.c.status.server_lsn, self.cur.wal_end)
            durable = self.shipper.poll(0)
            if durable is not None:
                self.to_store = durable
            if self.to_store is not None and now - last_save >= 0.1:
                self.store(self.to_store)
                last_save = now
            if now - last_heartbeat >= self.c.heartbeat_interval:
                self.heartbeat()
                last_heartbeat = now
            self.c.report(self.shipper)
        self.shipper.flush(30)
        if self.shipper.tracker.durable is not None:
            self.store(self.shipper.tracker.durable)
        self.shipper.flush(30)

    def store(self, lsn):
        self.to_store = None

        def stored():
            self.cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
            self.c.status.confirmed = max(self.c.status.confirmed, lsn)

        self.c.positions.save(self.shipper, {"lsn": lsn, "snapshot_done": True}, stored)

    def heartbeat(self):
        """Idle captured tables still let WAL grow (other tables, other databases): once all
        we received is durable, the server's WAL end is a safe position to confirm."""
        wal_end = self.cur.wal_end
        if self.txn is None and self.shipper.tracker.idle() and wal_end > (self.shipper.tracker.durable or 0):
            self.shipper.tracker.mark(wal_end)

    def handle(self, lsn, msg):
        self.c.status.lsn = max(self.c.status.lsn, lsn)
        if isinstance(msg, pgoutput.Begin):
            self.txn = _Transaction(msg, self.shipper.tracker.open(), msg.final_lsn < self.resume_lsn)
        elif isinstance(msg, pgoutput.Commit):
            self.shipper.tracker.close(self.txn.batch, msg.end_lsn)
            self.txn = None
        elif isinstance(msg, pgoutput.Relation):
            with self.conn.cursor() as cur:
                key = _primary_key(cur, msg.relid)
            # Sent before the first change to a table and again after each schema change.
            self.relations[msg.relid] = Table(msg.schema, msg.table, [(c.name, c.type_oid) for c in msg.columns], key)
        elif isinstance(msg, (pgoutput.Insert, pgoutput.Update, pgoutput.Delete)) and not self.txn.skip:
            self.row_change(lsn, msg)
        elif isinstance(msg, pgoutput.Truncate) and not self.txn.skip:
            for relid in msg.relids:
                table = self.relations[relid]
                event = truncate_event(topic_name(self.c.prefix, table.schema, table.name), self.source(table, lsn))
                self.shipper.send(event, self.txn.batch)

    def source(self, table, lsn):
        return Source("postgresql", self.db, table.schema, table.name, lsn, self.txn.xid, self.txn.ts_ms)

    def row_change(self, lsn, msg):
        table = self.relations[msg.relid]
        if isinstance(msg, pgoutput.Insert):
            op, before, after = "c", None, _row(table.columns, msg.new)
        elif isinstance(msg, pgoutput.Update):
            op, after = "u", _row(table.columns, msg.new)
            before = _row(table.columns, msg.old) if msg.old is not None else None
        else:
            op, before, after = "d", _row(table.columns, msg.old), None
        topic = topic_name(self.c.prefix, table.schema, table.name)
        for event in row_events(topic, table.key, op, before, after, self.source(table, lsn)):
            self.shipper.send(event, self.txn.batch)
