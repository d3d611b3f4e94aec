"""PostgreSQL connector: publication + pgoutput slot, exported-snapshot read, then the stream.

Start-up order decides "no gap, no overlap": the slot is created with an exported snapshot;
the snapshot reads the tables as of exactly the slot's consistent point (op `r`), and the
stream then delivers every transaction committed after that point.
"""
from __future__ import annotations

from dataclasses import dataclass, field
import re
import select
import time
from typing import Any, Callable, Iterator

import psycopg2
import psycopg2.extras
from confluent_kafka import Producer
from psycopg2 import sql

from headwater.waiting import Stopped

from . import CdcError, SourceUnavailable, avro_columns, pgoutput, pgtypes
from .avro_columns import AvroColumn
from .avro_events import AvroEvents
from .connector import Connector, StatusTicker
from .envelope import (JSON, UNAVAILABLE, EventFormat, Source, create_template, create_value, event_key,
                       row_events, topic_name, truncate_event)
from .shipper import Batch, PositionStore, Shipper, new_producer

SNAPSHOT_MODES = ("initial", "never", "when_needed")
_PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in Unix milliseconds
_READ_BATCH = 2000  # replication messages decoded and produced per loop turn


@dataclass
class Table:
    schema: str
    name: str
    columns: list[tuple[str, int]]  # [(name, type_oid)] in column order
    key: list[str]  # primary key column names
    topic: str  # where the table's events go
    typed: bool = False  # values as Avro's (`avro_columns`: --schema-registry) rather than JSON's
    avro: list[AvroColumn] = field(init=False, repr=False)  # the columns as Avro fields, if typed
    # [(name, text -> value or None)]: each column's type looked up once, not per value
    converters: list[tuple[str, Callable[[str], Any] | None]] = field(init=False, repr=False)
    unavailable: dict[str, Any] = field(init=False, repr=False)  # what an unchanged TOASTed value holds, if not UNAVAILABLE

    def __post_init__(self) -> None:
        self.avro = [avro_columns.postgres_column(name, oid) for name, oid in self.columns] if self.typed else []
        if self.typed:
            self.converters = [(column.name, column.convert) for column in self.avro]
            self.unavailable = {column.name: avro_columns.unavailable(column) for column in self.avro}
        else:
            self.converters = [(name, pgtypes.converter(oid)) for name, oid in self.columns]
            self.unavailable = {}

    def define(self, events: EventFormat) -> Table:
        """Tell `events` the table's columns (its Avro schema), before its events."""
        events.define(f"{self.schema}.{self.name}", self.topic, self.avro, self.key)
        return self


@dataclass
class Progress:
    snapshotted: int = 0
    shipped: int = 0
    lsn: int = 0  # last change received from the slot
    confirmed: int = 0  # flush LSN confirmed to PostgreSQL
    server_lsn: int = 0  # the server's WAL end, from its keepalives

    def line(self) -> str:
        lag = max(0, self.server_lsn - self.confirmed)
        return (f"snapshotted {self.snapshotted} rows | shipped {self.shipped} events | "
                f"lsn {pgoutput.format_lsn(self.lsn)} | confirmed {pgoutput.format_lsn(self.confirmed)} | "
                f"lag {lag} bytes")


def connect(dsn: str, replication: bool = False):
    try:
        conn = psycopg2.connect(
            dsn, options=pgtypes.SESSION_OPTIONS,
            connection_factory=psycopg2.extras.LogicalReplicationConnection if replication else None)
    except psycopg2.OperationalError as exc:
        raise SourceUnavailable(f"cannot connect to PostgreSQL: {str(exc).strip().splitlines()[0]}") from None
    if not replication:  # a replication connection is always in autocommit
        conn.autocommit = True
    return conn


def check_wal_level(conn) -> None:
    with conn.cursor() as cur:
        cur.execute("SHOW wal_level")
        level = cur.fetchone()[0]
    if level != "logical":
        raise CdcError(f"wal_level is '{level}' but CDC needs 'logical': set wal_level = logical in "
                       "postgresql.conf (or run ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL")


def parse_table(name: str) -> tuple[str, str]:
    schema, _, table = name.rpartition(".")
    return schema or "public", table


def load_table(conn, schema: str, name: str, topic: str, typed: bool = False) -> Table:
    with conn.cursor() as cur:
        cur.execute("SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')", (schema, name))
        row = cur.fetchone()
        if row is None:
            raise CdcError(f"table {schema}.{name} does not exist in database {conn.info.dbname}")
        return Table(schema, name, _columns(cur, row[0]), _primary_key(cur, row[0]), topic, typed)


def _columns(cur, relid: int) -> list[tuple[str, int]]:
    cur.execute("SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s AND attnum > 0 "
                "AND NOT attisdropped ORDER BY attnum", (relid,))
    return [(name, oid) for name, oid in cur.fetchall()]


def _primary_key(cur, relid: int) -> list[str]:
    cur.execute("SELECT a.attname FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, pos) "
                "JOIN pg_attribute a ON a.attnum = k.attnum WHERE i.indrelid = %s AND i.indisprimary "
                "AND a.attrelid = i.indrelid ORDER BY k.pos", (relid,))
    return [name for (name,) in cur.fetchall()]


def _row(table: Table, values: list) -> dict[str, Any]:
    row = {}
    for (name, convert), value in zip(table.converters, values):
        if value.__class__ is str:  # the common case first
            row[name] = value if convert is None else convert(value)
        elif value is None:
            row[name] = None
        elif value is pgoutput.UNCHANGED:
            row[name] = table.unavailable.get(name, UNAVAILABLE)
        else:  # binary tuple data: we never ask for it, keep it lossless
            row[name] = pgtypes.to_json(pgtypes.BYTEA, "\\x" + value.hex())
    return row


class _Transaction:
    def __init__(self, begin: pgoutput.Begin, batch: Batch, skip: bool):
        self.xid = begin.xid
        self.ts_ms = begin.commit_ts_us // 1000 + _PG_EPOCH_MS
        self.batch = batch
        self.skip = skip  # already delivered before a crash: PostgreSQL may send it again
        self.sources: dict[int, dict] = {}  # relid -> the source block of its events, but the LSN
        self.creates: dict[int, bytes] = {}  # relid -> the value of its inserts, as a create_template


class PostgresConnector(Connector):
    """Capture `tables` into `<topic_prefix>.<schema>.<table>` topics on the broker at
    `bootstrap`. `producer` may be a confluent_kafka.Producer of your own (security settings,
    another cluster); it must keep acks=all and idempotence. `security`: librdkafka properties
    for a secured broker (security.protocol, sasl.*, ssl.*), used by every client of the connector.
    `schema_registry`: write Avro with the tables' schemas in the registry at this URL
    (`avro_events`; `registry_config`: more of its client's properties), not JSON."""

    def __init__(self, dsn: str, tables: list[str], topic_prefix: str, bootstrap: str, *, slot: str = "headwater",
                 publication: str = "headwater", snapshot_mode: str = "initial",
                 positions_topic: str = "headwater-cdc-positions", heartbeat_interval: float = 5.0,
                 slot_wait: float = 5.0, producer: Producer | None = None, log: Callable[[str], None] = print,
                 security: dict[str, str] | None = None, schema_registry: str | None = None,
                 registry_config: dict[str, str] | None = None):
        if snapshot_mode not in SNAPSHOT_MODES:
            raise CdcError(f"unknown snapshot mode {snapshot_mode!r}; use one of {', '.join(SNAPSHOT_MODES)}")
        if not re.fullmatch(r"[a-z0-9_]+", slot):
            raise CdcError(f"slot name {slot!r} may only contain lower-case letters, digits and '_'")
        if not tables:
            raise CdcError("no tables given")
        super().__init__()
        self.dsn, self.table_names, self.prefix = dsn, tables, topic_prefix
        self.slot, self.publication, self.snapshot_mode = slot, publication, snapshot_mode
        self.heartbeat_interval, self.slot_wait = heartbeat_interval, slot_wait
        self.positions = PositionStore(bootstrap, positions_topic, f"postgresql:{slot}", security)
        self.security = security
        self.bootstrap, self._producer, self.log = bootstrap, producer, log
        self.events: EventFormat = AvroEvents(schema_registry, registry_config) if schema_registry else JSON
        self.progress = Progress()
        self._conn: Any = None  # catalog queries
        self._repl: Any = None  # the replication connection
        self._shipper: Shipper | None = None
        self._stream: _Stream | None = None

    # -- start-up --------------------------------------------------------------------------

    def _prepare(self, conn) -> list[Table]:
        check_wal_level(conn)
        tables = [load_table(conn, schema, name, topic_name(self.prefix, schema, name), self.events.typed)
                  .define(self.events) for schema, name in map(parse_table, self.table_names)]
        idents = sql.SQL(", ").join(sql.Identifier(t.schema, t.name) for t in tables)
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,))
            verb = "ALTER PUBLICATION {} SET TABLE {}" if cur.fetchone() else "CREATE PUBLICATION {} FOR TABLE {}"
            cur.execute(sql.SQL(verb).format(sql.Identifier(self.publication), idents))
        return tables

    def _slot(self, conn) -> tuple[bool, int | None]:
        """(exists, active_pid) of our slot."""
        with conn.cursor() as cur:
            cur.execute("SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (self.slot,))
            row = cur.fetchone()
        return (row is not None, row[0] if row else None)

    def _plan(self, stored: dict | None, slot_exists: bool) -> bool:
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

    def start(self) -> None:
        self._conn = conn = connect(self.dsn)
        db = conn.info.dbname
        tables = self._prepare(conn)
        stored = self.positions.load(wait_log=self.log, should_stop=self.stop_requested)
        exists, active_pid = self._slot(conn)
        deadline = time.monotonic() + self.slot_wait
        while active_pid is not None and time.monotonic() < deadline:
            time.sleep(0.2)  # a crashed predecessor's walsender lets go of the slot shortly
            exists, active_pid = self._slot(conn)
        if active_pid is not None:
            raise CdcError(f"replication slot {self.slot!r} is in use by another connection (PID {active_pid})")
        snapshot = self._plan(stored, exists)
        self._repl = repl = connect(self.dsn, replication=True)
        cur = repl.cursor()
        self._shipper = shipper = Shipper(self._producer or new_producer(self.bootstrap, self.security),
                                          on_wait=_keepalive(cur), should_stop=self.stop_requested)
        resume_lsn = stored["lsn"] if stored and not snapshot else 0
        if snapshot:
            if exists:
                conn.cursor().execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            self._ready(self._snapshot(repl, tables, db))
        elif not exists:
            cur.create_replication_slot(self.slot, output_plugin="pgoutput")
            self._ready(0)
        try:
            cur.start_replication(slot_name=self.slot, decode=False, start_lsn=resume_lsn,
                                  options={"proto_version": "1", "publication_names": self.publication})
        except psycopg2.errors.ObjectInUse as exc:
            raise CdcError(f"replication slot {self.slot!r} is in use: {exc.pgerror.strip().splitlines()[0]}") from None
        self._stream = _Stream(conn, cur, shipper, db, resume_lsn, self.prefix, self.positions, self.progress,
                               self.heartbeat_interval, self.ticker, self.log, self.events)
        self._started = True

    # -- snapshot --------------------------------------------------------------------------

    def _snapshot(self, repl, tables: list[Table], db: str) -> int:
        with repl.cursor() as cur:
            cur.execute(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
            _, consistent_point, snapshot_name, _ = cur.fetchone()
        lsn = pgoutput.parse_lsn(consistent_point)
        snap = connect(self.dsn)
        snap.autocommit = False
        snap.set_session(isolation_level="REPEATABLE READ", readonly=True)
        batch = self._shipper.tracker.open()
        try:
            with snap.cursor() as cur:
                cur.execute("SET TRANSACTION SNAPSHOT %s", (snapshot_name,))
                cur.execute("SELECT txid_snapshot_xmin(txid_current_snapshot()), "
                            "(extract(epoch FROM now()) * 1000)::bigint")
                xid, ts_ms = cur.fetchone()
            previous = None
            for table, values in self._snapshot_rows(snap, tables):
                if previous is not None:
                    self._send_read(batch, db, lsn, xid, ts_ms, *previous, "true")
                previous = (table, values)
            if previous is not None:
                self._send_read(batch, db, lsn, xid, ts_ms, *previous, "last")
        finally:
            snap.rollback()
            snap.close()
        self._shipper.tracker.close(batch, lsn)
        return lsn

    @staticmethod
    def _snapshot_rows(snap, tables: list[Table]) -> Iterator[tuple[Table, tuple]]:
        for table in tables:
            with snap.cursor(name="headwater_snapshot") as cur:
                cur.itersize = 5000
                cols = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c, _ in table.columns)
                cur.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(table.schema, table.name)))
                for values in cur:
                    yield table, values

    def _send_read(self, batch: Batch, db: str, lsn: int, xid: int, ts_ms: int, table: Table, values: tuple,
                   marker: str) -> None:
        source = Source("postgresql", db, table.schema, table.name, lsn, xid, ts_ms, marker)
        self._shipper.send_all(row_events(table.topic, table.key, "r", None, _row(table, values), source.as_json(),
                                          self.events), batch)
        self.progress.snapshotted += 1
        if self.progress.snapshotted % 1000 == 0:
            self._shipper.poll(0)  # run delivery callbacks as we go
            self.ticker.tick()
            if self.stop_requested():
                raise Stopped()   # "snapshot done" is not stored: the next start takes it again

    def _ready(self, lsn: int) -> None:
        """Store "snapshot done" before streaming: a crash after this resumes the stream; a crash
        before it takes the snapshot again (a half-shipped snapshot never meets the stream)."""
        stored = []
        while len(self._shipper.producer):
            self._flush_unless_stopped()
        self.positions.save(self._shipper, {"lsn": lsn, "snapshot_done": True}, lambda: stored.append(True))
        while not stored:
            self._flush_unless_stopped()

    def _flush_unless_stopped(self) -> None:
        if self.stop_requested():
            raise Stopped()
        self._shipper.flush(1)

    # -- stream ----------------------------------------------------------------------------

    def _ship(self, stopping: Callable[[], bool]) -> None:
        self._stream.loop(stopping)

    def _close(self) -> None:
        for conn in (self._repl, self._conn):
            if conn is not None:
                conn.close()

    def status(self) -> str:
        if self._shipper is not None:
            self.progress.shipped = self._shipper.delivered
        return self.progress.line()


def _keepalive(cur) -> Callable[[], None]:
    """While we wait on the broker, tell the walsender once a second that we are alive
    (no position moves), or it drops us after wal_sender_timeout."""
    last = [0.0]

    def keepalive() -> None:
        if time.monotonic() - last[0] >= 1 and not cur.closed:
            last[0] = time.monotonic()
            try:
                cur.send_feedback(force=True)
            except psycopg2.ProgrammingError:
                pass  # still taking the snapshot: no stream to keep alive yet
            except psycopg2.DatabaseError as exc:
                if "no COPY in progress" not in str(exc):
                    raise
                # the same, once the snapshot's CREATE_REPLICATION_SLOT ran on this connection
    return keepalive


def _no_relid(_payload: bytes) -> None:
    return None


class _Stream:
    """The streaming loop: decode, produce, and confirm only what the broker holds."""

    def __init__(self, conn, cur, shipper: Shipper, db: str, resume_lsn: int, prefix: str,
                 positions: PositionStore, progress: Progress, heartbeat_interval: float, ticker: StatusTicker,
                 log: Callable[[str], None], events: EventFormat):
        self.conn, self.cur, self.shipper, self.db = conn, cur, shipper, db
        self.log, self.events = log, events
        self.resume_lsn, self.prefix, self.positions = resume_lsn, prefix, positions
        self.progress, self.heartbeat_interval, self.ticker = progress, heartbeat_interval, ticker
        self.relations: dict[int, Table] = {}
        self.txn: _Transaction | None = None
        self.to_store: int | None = None
        self.now_ms = 0  # see handle_all

    def loop(self, stopping: Callable[[], bool]) -> None:
        last_save = last_heartbeat = time.monotonic()
        while not stopping():
            received = self.receive()
            if received:
                self.handle_all(received)
            else:
                select.select([self.cur.connection], [], [], 0.05)
            now = time.monotonic()
            self.progress.server_lsn = max(self.progress.server_lsn, self.cur.wal_end)
            durable = self.shipper.settle()
            if durable is not None:
                self.to_store = durable
            if self.to_store is not None and now - last_save >= 0.1:
                self.store(self.to_store)
                last_save = now
            if now - last_heartbeat >= self.heartbeat_interval:
                self.heartbeat()
                last_heartbeat = now
            self.ticker.tick()
        self.shipper.flush_on_stop(self.log)
        if self.shipper.tracker.durable is not None:
            self.store(self.shipper.tracker.durable)
        self.shipper.flush_on_stop(self.log)

    def receive(self) -> list[tuple[int, bytes]]:
        """The (LSN, pgoutput bytes) of the messages already here, up to `_READ_BATCH`."""
        read, received = self.cur.read_message, []
        try:
            while len(received) < _READ_BATCH:
                msg = read()
                if msg is None:
                    break
                received.append((msg.data_start, msg.payload))
        except psycopg2.DatabaseError as exc:  # libpq reports a dropped stream this way
            raise psycopg2.OperationalError(f"replication stream lost: {exc}") from exc
        return received

    def handle_all(self, received: list[tuple[int, bytes]]) -> None:
        """Decode a run of messages and hand their events to the producer. Inserts, most of a
        stream, go to `insert` undecoded: each step less per event counts at this rate."""
        decode, handle, insert, insert_relid = pgoutput.decode, self.handle, self.insert, pgoutput.insert_relid
        if self.events.typed:  # the inserts' fast path writes JSON
            insert_relid = _no_relid
        self.now_ms = time.time_ns() // 1_000_000  # the processing time of inserts: once per run
        for lsn, payload in received:
            relid = insert_relid(payload)
            if relid is None or not insert(lsn, relid, payload):
                handle(lsn, decode(payload))
        self.progress.lsn = max(self.progress.lsn, received[-1][0])

    def store(self, lsn: int) -> None:
        self.to_store = None

        def stored() -> None:
            self.cur.send_feedback(write_lsn=lsn, flush_lsn=lsn, force=True)
            self.progress.confirmed = max(self.progress.confirmed, lsn)

        self.positions.save(self.shipper, {"lsn": lsn, "snapshot_done": True}, stored)

    def heartbeat(self) -> None:
        """Idle captured tables still let WAL grow (other tables, other databases): once all
        we received is durable, the server's WAL end is a safe position to confirm."""
        wal_end = self.cur.wal_end
        if self.txn is None and self.shipper.tracker.idle() and wal_end > (self.shipper.tracker.durable or 0):
            self.shipper.tracker.mark(wal_end)

    def handle(self, lsn: int, msg: pgoutput.Message) -> None:
        kind = msg.__class__
        if kind is pgoutput.Insert or kind is pgoutput.Update or kind is pgoutput.Delete:
            if not self.txn.skip:
                self.row_change(lsn, msg)
        elif kind is pgoutput.Begin:
            self.txn = _Transaction(msg, self.shipper.tracker.open(), msg.final_lsn < self.resume_lsn)
        elif kind is pgoutput.Commit:
            self.shipper.tracker.close(self.txn.batch, msg.end_lsn)
            self.txn = None
        elif kind is pgoutput.Relation:
            with self.conn.cursor() as cur:
                key = _primary_key(cur, msg.relid)
            # Sent before the first change to a table and again after each schema change.
            # In Avro a new schema version then, registered with the table's next event.
            self.relations[msg.relid] = Table(msg.schema, msg.table, [(c.name, c.type_oid) for c in msg.columns],
                                              key, topic_name(self.prefix, msg.schema, msg.table),
                                              self.events.typed).define(self.events)
        elif kind is pgoutput.Truncate and not self.txn.skip:
            for relid in msg.relids:
                table = self.relations[relid]
                self.shipper.send_all([truncate_event(table.topic, self.source(relid, lsn), self.events)],
                                      self.txn.batch)

    def source(self, relid: int, lsn: int) -> dict:
        """The envelope's source block: built once per table and transaction, then copied."""
        source = self.txn.sources.get(relid)
        if source is None:
            table = self.relations[relid]
            source = Source("postgresql", self.db, table.schema, table.name, lsn, self.txn.xid,
                            self.txn.ts_ms).as_json()
            self.txn.sources[relid] = source
        source = source.copy()
        source["lsn"] = lsn
        return source

    def insert(self, lsn: int, relid: int, payload: bytes) -> bool:
        """An insert from its bytes straight to the producer: its row in one pass, its value filled
        into a template (building one costs more than one generic envelope, so the template comes
        with a table's second insert in a transaction). False where this does not apply (a
        table's first insert in a transaction, a transaction already delivered, binary or
        unchanged values): `handle` takes the message then."""
        txn = self.txn
        template = txn.creates.get(relid)
        if template is None:
            if relid not in txn.sources:  # never so in a skipped transaction: handle() skips it
                return False
            template = txn.creates[relid] = create_template(self.source(relid, lsn))
        table = self.relations[relid]
        row = pgoutput.insert_row(payload, table.converters)
        if row is None:
            return False
        self.shipper.send(table.topic, event_key(table.key, row), create_value(template, row, lsn, self.now_ms),
                          txn.batch)
        return True

    def row_change(self, lsn: int, msg: pgoutput.Insert | pgoutput.Update | pgoutput.Delete) -> None:
        table = self.relations[msg.relid]
        if msg.__class__ is pgoutput.Insert:
            op, before, after = "c", None, _row(table, msg.new)
        elif msg.__class__ is pgoutput.Update:
            op, after = "u", _row(table, msg.new)
            before = _row(table, msg.old) if msg.old is not None else None
        else:
            op, before, after = "d", _row(table, msg.old), None
        self.shipper.send_all(row_events(table.topic, table.key, op, before, after, self.source(msg.relid, lsn),
                                         self.events), self.txn.batch)
