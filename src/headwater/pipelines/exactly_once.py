"""Exactly-once output: sinks that make a replayed micro-batch harmless.

Spark replays a micro-batch whose output it cannot prove was committed (after a crash,
a restart, a failed task), with exactly the same input (the source is replayable and
its offsets are in the checkpoint). A sink is then exactly-once if writing a batch a
second time changes nothing. Each sink here is a `foreachBatch` function that does so,
keyed on the batch id Spark passes:

- `SqliteUpsert`, `PostgresUpsert`: rows upserted by their result key, the batch id
  recorded in the same transaction; a batch already recorded is skipped.
- `ParquetPerBatch`: one directory per batch id, overwritten on replay.
- `TopicPerBatch`: records tagged with (batch id, sequence number) headers; on replay
  what already reached each partition is read back and not produced again.
"""

from __future__ import annotations

import json
import sqlite3
import zlib

import psycopg2
from confluent_kafka import Producer, TopicPartition
from psycopg2.extras import Json, execute_values
from pyspark.sql import DataFrame, Row
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, ByteType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, ShortType, StringType, StructField,
                               StructType, TimestampNTZType, TimestampType)

from headwater.spark.cluster import Cluster, consumer
from headwater.spark.options import Subscription

BATCHES_TABLE = "spark_batches"


def _sort_key(row) -> tuple:
    # Rows of a batch in a fixed order, so a replay writes them in the same order.
    return tuple("" if v is None else str(v) for v in row)


class _Upsert:
    """What the SQL sinks share: each batch in one transaction that first claims (sink,
    batch_id) in `spark_batches`, then upserts the rows by key. A replayed batch finds
    its claim taken and writes nothing; of two concurrent replays the second waits on
    the first's claim (the primary key) and then finds it taken."""

    batches_ddl = (f"CREATE TABLE IF NOT EXISTS {BATCHES_TABLE} (sink TEXT, batch_id BIGINT, rows BIGINT, "
                   "PRIMARY KEY (sink, batch_id))")

    def __init__(self, table: str, key_cols: list[str], param: str):
        self.table, self.key_cols = table, list(key_cols)
        self.claim_sql = (f"INSERT INTO {BATCHES_TABLE} (sink, batch_id, rows) VALUES ({param}, {param}, {param}) "
                          "ON CONFLICT (sink, batch_id) DO NOTHING")

    def sorted_rows(self, batch: DataFrame) -> list:
        # Key order first: concurrent writers then lock the same keys in the same order.
        keys = [batch.columns.index(k) for k in self.key_cols]
        return sorted(batch.collect(), key=lambda row: _sort_key([row[i] for i in keys]) + _sort_key(row))

    def table_ddl(self, column_defs: list[str]) -> str:
        return (f"CREATE TABLE IF NOT EXISTS {self.table} ({', '.join(column_defs)}, "
                f"PRIMARY KEY ({', '.join(self.key_cols)}))")

    def upsert_sql(self, columns: list[str], values: str) -> str:
        cols = columns + ["batch_id"]
        updates = ", ".join(f"{c} = excluded.{c}" for c in cols if c not in self.key_cols)
        return (f"INSERT INTO {self.table} ({', '.join(cols)}) VALUES {values} "
                f"ON CONFLICT ({', '.join(self.key_cols)}) DO UPDATE SET {updates}")


class SqliteUpsert(_Upsert):
    """Upsert each batch's rows into `table` (created from the first batch's columns)
    with a `batch_id` column; `spark_batches` records (table, batch_id)."""

    def __init__(self, path: str, table: str, key_cols: list[str]):
        super().__init__(table, key_cols, "?")
        self.path = str(path)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows, columns = self.sorted_rows(batch), batch.columns
        db = sqlite3.connect(self.path)
        try:
            with db:  # one transaction: the rows and the batch id, or neither
                db.execute(self.batches_ddl)
                if db.execute(self.claim_sql, (self.table, batch_id, len(rows))).rowcount == 0:
                    return  # a replay
                db.execute(self.table_ddl(columns + ["batch_id"]))
                db.executemany(self.upsert_sql(columns, f"({', '.join('?' * (len(columns) + 1))})"),
                               [tuple(_sql_value(v) for v in row) + (batch_id,) for row in rows])
        finally:
            db.close()


def _sql_value(value):
    return value.isoformat(sep=" ") if hasattr(value, "isoformat") else value


class PostgresUpsert(_Upsert):
    """`SqliteUpsert` on PostgreSQL: the table gets typed columns from the batch's
    schema (see `postgres_column`). A failure to reach or write the database fails the
    query with a message naming the sink and the server; the batch is then not
    recorded, and a restart on the same checkpoint writes it once."""

    def __init__(self, dsn: str, table: str, key_cols: list[str]):
        super().__init__(table, key_cols, "%s")
        self.dsn = dsn
        where = psycopg2.extensions.parse_dsn(dsn)
        self.server = f"{where.get('host', 'localhost')}:{where.get('port', 5432)}/{where.get('dbname', '')}"

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows, columns = self.sorted_rows(batch), batch.columns
        types, converts = zip(*(postgres_column(f) for f in batch.schema.fields))
        values = [tuple(v if v is None or c is None else c(v) for v, c in zip(row, converts)) + (batch_id,)
                  for row in rows]
        try:
            db = psycopg2.connect(self.dsn)
            try:
                with db, db.cursor() as cur:  # CREATE ... IF NOT EXISTS races with itself: one at a time
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
                    cur.execute(self.batches_ddl)
                    cur.execute(self.table_ddl([f"{c} {t}" for c, t in zip(columns, types)] + ["batch_id bigint"]))
                with db, db.cursor() as cur:  # one transaction: the rows and the batch id, or neither
                    cur.execute(self.claim_sql, (self.table, batch_id, len(rows)))
                    if cur.rowcount == 1:
                        execute_values(cur, self.upsert_sql(columns, "%s"), values, page_size=1000)
            finally:
                db.close()
        except psycopg2.Error as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RuntimeError(f"PostgresUpsert({self.table}) at {self.server}: batch {batch_id} "
                               f"not written: {reason}") from None


_DDL_LOCK = zlib.crc32(b"headwater.pipelines.exactly_once DDL")  # an advisory lock key
_POSTGRES_TYPES = {BooleanType: "boolean", ByteType: "smallint", ShortType: "smallint", IntegerType: "integer",
                   LongType: "bigint", FloatType: "real", DoubleType: "double precision", StringType: "text",
                   BinaryType: "bytea", DateType: "date", TimestampNTZType: "timestamp"}


def postgres_column(field: StructField):
    """(PostgreSQL type, conversion of a collected value or None) for a Spark column."""
    t = field.dataType
    if isinstance(t, TimestampType):  # Spark collects local time without a zone
        return "timestamptz", lambda v: v.astimezone()
    if isinstance(t, DecimalType):
        return f"numeric({t.precision}, {t.scale})", None
    if isinstance(t, (ArrayType, MapType, StructType)):
        return "jsonb", lambda v: Json(_plain(v), dumps=lambda o: json.dumps(o, default=str))
    if type(t) not in _POSTGRES_TYPES:
        raise TypeError(f"PostgresUpsert: no PostgreSQL type for column {field.name} ({t.simpleString()})")
    return _POSTGRES_TYPES[type(t)], None


def _plain(value):
    """Structs (Rows) as objects, also inside arrays and maps, for JSON."""
    if isinstance(value, Row):
        return {k: _plain(v) for k, v in value.asDict().items()}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class ParquetPerBatch:
    """Each batch to `<path>/batch_id=<id>`; read the whole as one partitioned dataset."""

    def __init__(self, path: str):
        self.path = str(path)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{self.path}/batch_id={batch_id}")


class TopicPerBatch:
    """Rows as JSON records to `topic`, key from `key_col`, partition = crc32(key) mod
    partitions (fixed, so a replayed row goes where it went the first time). An empty
    batch writes nothing and asks the broker nothing."""

    def __init__(self, client: dict, topic: str, key_col: str):
        self.client, self.topic, self.key_col = dict(client), topic, key_col

    def record(self, row: Row) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
        """The key, value and headers of a row's record."""
        return str(row[self.key_col]).encode(), json.dumps(row.asDict(), default=str).encode(), []

    def partitions(self) -> list[int]:
        cluster = Cluster(self.client)
        try:
            partitions = [p for _, p in cluster.partitions(Subscription(topics=(self.topic,)))]
        finally:
            cluster.close()
        if not partitions:
            raise RuntimeError(f"TopicPerBatch: topic {self.topic!r} does not exist; create it first")
        return partitions

    def _written(self, partitions: list[int]) -> dict[int, tuple[int, int]]:
        """(batch id, sequence) of the last record in each partition, (-1, -1) if none."""
        cluster = Cluster(self.client)
        last = {}
        try:
            for p in partitions:
                low, high = cluster.watermarks((self.topic, p))
                last[p] = (-1, -1)
                if high > low:
                    reader = consumer(self.client)
                    reader.assign([TopicPartition(self.topic, p, high - 1)])
                    msg = reader.poll(30)
                    reader.close()
                    if msg is None or msg.error():
                        raise RuntimeError(f"cannot read back {self.topic}-{p} at offset {high - 1}")
                    headers = dict(msg.headers() or [])
                    last[p] = (int(headers["spark.batch"]), int(headers["spark.seq"]))
        finally:
            cluster.close()
        return last

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(batch.collect(), key=_sort_key)
        if not rows:
            return
        partitions = self.partitions()
        done = self._written(partitions)
        producer = Producer({**self.client, "acks": "all", "enable.idempotence": True})
        failures = []
        for seq, row in enumerate(rows):
            key, value, headers = self.record(row)
            partition = partitions[zlib.crc32(key or b"") % len(partitions)]
            if (batch_id, seq) <= done[partition]:
                continue  # written before the replay
            producer.produce(self.topic, value, key, partition=partition,
                             headers=headers + [("spark.batch", str(batch_id).encode()),
                                                ("spark.seq", str(seq).encode())],
                             on_delivery=lambda err, _: err and failures.append(err))
            producer.poll(0)
        if producer.flush(60) or failures:
            raise RuntimeError(f"writing batch {batch_id} to {self.topic}: {failures[:1] or 'not acknowledged'}")
