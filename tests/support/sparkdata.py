"""Test data for the pipelines (the plain-Python model of Spark's watermark is `reference.admitted`).

Streams are fed in fixed micro-batches (one JSON file per batch with the file
source's maxFilesPerTrigger=1, or maxOffsetsPerTrigger on a one-partition topic) and
run with trigger(availableNow=True), so the batch boundaries, and with them the
watermark, are the same in every run.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import uuid


BASE_MS = 1_700_000_000_000 // 3_600_000 * 3_600_000  # an hour boundary
MINUTE = 60_000


def ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).replace(tzinfo=None)


def write_batches(directory, batches: list[list[dict]]) -> str:
    """One JSON-lines file per micro-batch, modification times in batch order (the
    file source takes files oldest first)."""
    os.makedirs(directory, exist_ok=True)
    for i, batch in enumerate(batches):
        path = os.path.join(directory, f"batch-{i:04d}.json")
        with open(path, "w") as f:
            for event in batch:
                f.write(json.dumps(event) + "\n")
        os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
    return str(directory)


def file_stream(spark, directory, schema: str, time_field: str = "ts_ms"):
    from pyspark.sql import functions as F

    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))
            .withColumn("event_time", F.timestamp_millis(time_field)))


def run_to_end(df, checkpoint, name: str | None = None, mode: str = "append", parquet=None):
    """Run a streaming DataFrame over everything available into a memory table, or
    into Parquet files when the query is to be restarted on its checkpoint (the memory
    sink cannot recover); returns all rows in the sink and the query."""
    writer = df.writeStream.outputMode(mode).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    if parquet is not None:
        query = writer.format("parquet").option("path", str(parquet)).start()
    else:
        name = name or "t_" + uuid.uuid4().hex[:8]
        query = writer.format("memory").queryName(name).start()
    query.awaitTermination()
    spark = df.sparkSession
    return (spark.read.parquet(str(parquet)) if parquet is not None else spark.table(name)).collect(), query


def user_events(seed: int, batches: int = 6, per_batch: int = 12, users=("ann", "bob", "cy")):
    """Clicks of a few users: mostly in order, some late within a minute, and from the
    fourth batch on some far too late (half an hour behind)."""
    rng = random.Random(seed)
    out, clock, n = [], BASE_MS, 0
    for b in range(batches):
        batch = []
        for _ in range(per_batch):
            clock += rng.randint(2_000, 25_000)
            kind = rng.random()
            t = clock
            if kind < 0.15:
                t = clock - rng.randint(5_000, 60_000)  # late, but within the lateness
            elif kind < 0.25 and b >= 3:
                t = clock - rng.randint(30 * MINUTE, 40 * MINUTE)  # too late
            n += 1
            batch.append({"event_id": f"e{n}", "user_id": rng.choice(users), "ts_ms": t})
        if b == 3:
            batch.extend(dict(e) for e in out[2][:2])  # delivered twice
        out.append(batch)
    return out


def produce(bootstrap: str, topic: str, records, **config) -> None:
    """Produce (key, value, partition, headers, timestamp_ms) tuples, waiting for acks."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    failed = []
    for key, value, partition, headers, timestamp in records:
        extra = {k: v for k, v in (("partition", partition), ("headers", headers), ("timestamp", timestamp))
                 if v is not None}
        producer.produce(topic, value, key, on_delivery=lambda err, _: err and failed.append(err), **extra)
    assert producer.flush(30) == 0 and not failed, failed


def create_topic(bootstrap: str, topic: str, partitions: int, **configs) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, config=configs)])[topic].result(30)


def headwater_stream(spark, bootstrap: str, **options):
    reader = spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def headwater_batch(spark, bootstrap: str, **options):
    reader = spark.read.format("headwater").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def read_back(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> (key, value) of every record of every partition, read by a plain consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.partition.eof": True})
    partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    found, ended = {}, set()
    while len(ended) < len(partitions):
        msg = consumer.poll(30)
        assert msg is not None, f"timed out reading {topic}"
        if msg.error():
            ended.add(msg.partition())
        else:
            found[(msg.partition(), msg.offset())] = (msg.key(), msg.value())
    consumer.close()
    return found


def batches_written(path) -> int:
    """Micro-batches an exactly-once SQL sink has recorded in the SQLite file at `path`."""
    import sqlite3

    try:
        db = sqlite3.connect(path)
        try:
            return db.execute("SELECT COUNT(*) FROM spark_batches").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # not created yet
        return 0
