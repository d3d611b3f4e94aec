"""Spark source benchmark: Headwater through the `headwater` source vs Spark's own
rate source, and produce-to-window-result latency.

    .venv/bin/python bench/spark_source.py [--rows 400000] [--rate 200] [--seconds 30]

1. Throughput: rows/s from a topic through the source into the `noop` sink, next to the
   built-in `rate-micro-batch` source into the same sink, same batch size, same
   session; rows/s = rows / time spent in micro-batches (Spark's triggerExecution).
2. Latency: events produced at a steady rate; a 1-second tumbling window count in
   update mode; for every window update written by foreachBatch, write time minus the
   produce time of the newest event in it. Median and p95.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import functions as F

import headwater.spark
from headwater.testing import BrokerProcess


def fill(bootstrap: str, topic: str, rows: int, size: int = 100) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1_000_000,
                         "compression.type": "none"})
    value = b"x" * size
    for i in range(rows):
        while True:
            try:
                producer.produce(topic, value, str(i).encode())
                break
            except BufferError:
                producer.poll(0.05)
    producer.flush(120)


def batch_rate(query) -> tuple[int, float]:
    progress = [p for p in query.recentProgress if p.numInputRows]
    rows = sum(p.numInputRows for p in progress)
    seconds = sum(p.durationMs.get("triggerExecution", 0) for p in progress) / 1000
    return rows, rows / seconds if seconds else 0.0


def headwater_throughput(spark, bootstrap, topic, per_batch, workdir) -> tuple[int, float]:
    stream = (spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", per_batch).load())
    query = (stream.writeStream.format("noop").option("checkpointLocation", str(workdir / "ck-hw"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return batch_rate(query)


def rate_throughput(spark, per_batch, batches, workdir) -> tuple[int, float]:
    stream = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", per_batch) \
        .option("numPartitions", 2).load()
    # A pause between batches lets the query be stopped without interrupting one
    # (the pause is not counted: the rate is rows per second spent in batches).
    query = (stream.writeStream.format("noop").option("checkpointLocation", str(workdir / "ck-rate"))
             .trigger(processingTime="2 seconds").start())
    while query.lastProgress is None or query.lastProgress["batchId"] < batches or query.status["isTriggerActive"]:
        time.sleep(0.05)
    query.stop()
    return batch_rate(query)


def latency(spark, bootstrap, topic, rate, seconds, workdir) -> list[float]:
    written: list[float] = []

    def record(batch, batch_id):
        now = time.time()
        written.extend(now - r.newest.timestamp() for r in batch.collect())

    events = (spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "latest").load())
    counts = (events.withWatermark("timestamp", "1 second")
              .groupBy(F.window("timestamp", "1 second")).agg(F.count(F.lit(1)).alias("n"),
                                                              F.max("timestamp").alias("newest")))
    query = (counts.writeStream.outputMode("update").foreachBatch(record)
             .option("checkpointLocation", str(workdir / "ck-lat")).trigger(processingTime="0 seconds").start())
    while query.lastProgress is None:  # the source has its starting offsets
        time.sleep(0.1)

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        due = int((time.monotonic() - start) * rate)
        while sent < due:
            producer.produce(topic, b"e", str(sent).encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(30)
    time.sleep(3)
    query.stop()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--per-batch", type=int, default=100_000)
    parser.add_argument("--rate", type=int, default=200, help="events/s for the latency run")
    parser.add_argument("--seconds", type=int, default=30)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="hw-spark-bench-"))
    with BrokerProcess(workdir / "data", "--num-partitions", "2", "--flush", "never") as broker:
        fill(broker.bootstrap, "bench", args.rows)
        spark = headwater.spark.session(app_name="spark-source-bench")
        headwater_throughput(spark, broker.bootstrap, "bench", args.per_batch, workdir / "warm")  # JIT, workers
        hw_rows, hw_rate = headwater_throughput(spark, broker.bootstrap, "bench", args.per_batch, workdir)
        rt_rows, rt_rate = rate_throughput(spark, args.per_batch, args.rows // args.per_batch, workdir)
        lat = latency(spark, broker.bootstrap, "latency", args.rate, args.seconds, workdir)
        spark.stop()

    print()
    print(f"{'source -> noop sink':<34}{'rows':>10}{'rows/s':>14}")
    print(f"{'headwater (2 partitions)':<34}{hw_rows:>10}{hw_rate:>14,.0f}")
    print(f"{'rate-micro-batch (2 partitions)':<34}{rt_rows:>10}{rt_rate:>14,.0f}")
    print(f"{'ratio headwater / rate':<34}{'':>10}{hw_rate / rt_rate:>14.2f}")
    print()
    lat.sort()
    print(f"produce -> 1 s window update at {args.rate} events/s for {args.seconds} s: "
          f"{len(lat)} updates, median {statistics.median(lat) * 1000:.0f} ms, "
          f"p95 {lat[int(len(lat) * 0.95)] * 1000:.0f} ms")


if __name__ == "__main__":
    main()
