"""Exactly-once output: sinks that make a replayed micro-batch harmless.

Spark replays a micro-batch whose output it cannot prove was committed (after a crash,
a restart, a failed task), with exactly the same input (the source is replayable and
its offsets are in the checkpoint). A sink is then exactly-once if writing a batch a
second time changes nothing. Each sink here is a `foreachBatch` function that does so,
keyed on the batch id Spark passes:

- `SqliteUpsert`: rows upserted by their result key, the batch id recorded in the same
  transaction; a batch already recorded is skipped.
- `ParquetPerBatch`: one directory per batch id, overwritten on replay.
- `TopicPerBatch`: records tagged with (batch id, sequence number) headers; on replay
  what already reached each partition is read back and not produced again.
"""

from __future__ import annotations

import json
import sqlite3
import zlib

from confluent_kafka import Producer, TopicPartition
from pyspark.sql import DataFrame

from headwater.spark.cluster import Cluster, consumer
from headwater.spark.options import Subscription

BATCHES_TABLE = "spark_batches"


def _sort_key(row) -> tuple:
    # Rows of a batch in a fixed order, so a replay writes them in the same order.
    return tuple("" if v is None else str(v) for v in row)


class SqliteUpsert:
    """Upsert each batch's rows into `table` (created from the first batch's columns)
    with a `batch_id` column; `spark_batches` records (table, batch_id)."""

    def __init__(self, path: str, table: str, key_cols: list[str]):
        self.path, self.table, self.key_cols = str(path), table, list(key_cols)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(batch.collect(), key=_sort_key)
        columns = batch.columns
        db = sqlite3.connect(self.path)
        try:
            with db:  # one transaction: the rows and the batch id, or neither
                db.execute(f"CREATE TABLE IF NOT EXISTS {BATCHES_TABLE} (sink TEXT, batch_id INTEGER, rows INTEGER, "
                           "PRIMARY KEY (sink, batch_id))")
                if db.execute(f"SELECT 1 FROM {BATCHES_TABLE} WHERE sink = ? AND batch_id = ?",
                              (self.table, batch_id)).fetchone():
                    return
                cols = ", ".join(columns + ["batch_id"])
                db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({cols}, PRIMARY KEY ({', '.join(self.key_cols)}))")
                updates = ", ".join(f"{c} = excluded.{c}" for c in columns + ["batch_id"] if c not in self.key_cols)
                db.executemany(
                    f"INSERT INTO {self.table} ({cols}) VALUES ({', '.join('?' * (len(columns) + 1))}) "
                    f"ON CONFLICT ({', '.join(self.key_cols)}) DO UPDATE SET {updates}",
                    [tuple(_sql_value(v) for v in row) + (batch_id,) for row in rows])
                db.execute(f"INSERT INTO {BATCHES_TABLE} VALUES (?, ?, ?)", (self.table, batch_id, len(rows)))
        finally:
            db.close()


def _sql_value(value):
    return value.isoformat(sep=" ") if hasattr(value, "isoformat") else value


class ParquetPerBatch:
    """Each batch to `<path>/batch_id=<id>`; read the whole as one partitioned dataset."""

    def __init__(self, path: str):
        self.path = str(path)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.write.mode("overwrite").parquet(f"{self.path}/batch_id={batch_id}")


class TopicPerBatch:
    """Rows as JSON records to `topic`, key from `key_col`, partition = crc32(key) mod
    partitions (fixed, so a replayed row goes where it went the first time)."""

    def __init__(self, client: dict, topic: str, key_col: str):
        self.client, self.topic, self.key_col = dict(client), topic, key_col

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
        cluster = Cluster(self.client)
        try:
            partitions = [p for _, p in cluster.partitions(Subscription(topics=(self.topic,)))]
        finally:
            cluster.close()
        done = self._written(partitions)
        producer = Producer({**self.client, "acks": "all", "enable.idempotence": True})
        failures = []
        for seq, row in enumerate(rows):
            key = str(row[self.key_col]).encode()
            partition = partitions[zlib.crc32(key) % len(partitions)]
            if (batch_id, seq) <= done[partition]:
                continue  # written before the replay
            value = json.dumps(row.asDict(), default=str).encode()
            producer.produce(self.topic, value, key, partition=partition,
                             headers=[("spark.batch", str(batch_id).encode()), ("spark.seq", str(seq).encode())],
                             on_delivery=lambda err, _: err and failures.append(err))
            producer.poll(0)
        if producer.flush(60) or failures:
            raise RuntimeError(f"writing batch {batch_id} to {self.topic}: {failures[:1] or 'not acknowledged'}")
