"""CDC speed: change events/s into the topic next to PostgreSQL's own logical decoding rate,
and commit-to-topic latency at a moderate write rate.

    .venv/bin/python bench/cdc_throughput.py [--rows 50000] [--rate 200] [--seconds 5] [--smoke]

Starts a throw-away PostgreSQL cluster (`headwater.testing.PostgresServer`), a Headwater broker, and
`headwater cdc postgres` as a child process, all on loopback.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from headwater.cdc import pgoutput
from headwater.cdc.shipper import new_producer
from headwater.testing import PostgresServer, bench_arguments, start_broker, wait_until

TOPIC = "bench.public.item"


def topic_size(consumer):
    parts = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    return sum(consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[1] for p in parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000, help="rows in the bulk write")
    parser.add_argument("--rate", type=int, default=200, help="commits/s for the latency run")
    parser.add_argument("--seconds", type=float, default=5, help="length of the latency run")
    args = bench_arguments(parser, {"rows": 500, "rate": 20, "seconds": 1})

    pg = PostgresServer()
    tmp = Path(tempfile.mkdtemp(prefix="headwater-bench-"))
    broker = start_broker(tmp / "data", "--num-partitions", "3")
    connector = None
    try:
        pg.execute("CREATE TABLE item (id int PRIMARY KEY, payload text)")
        pg.execute("CREATE PUBLICATION raw FOR TABLE item")
        pg.execute("SELECT pg_create_logical_replication_slot('raw', 'pgoutput')")
        connector = subprocess.Popen(
            [sys.executable, "-m", "headwater", "cdc", "postgres", "--dsn", pg.dsn, "--tables", "item",
             "--topic-prefix", "bench", "--bootstrap-server", broker.bootstrap, "--status-interval", "3600"],
            stderr=open(tmp / "connector.log", "ab"))
        wait_until(lambda: pg.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'headwater' "
                                      "AND active")[0][0] == 1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench"})

        # 1. bulk write: one transaction of --rows inserts
        pg.execute("INSERT INTO item SELECT g, md5(g::text) FROM generate_series(1, %s) g", (args.rows,))
        committed = time.perf_counter()
        wait_until(lambda: topic_size(consumer) >= args.rows, 300, 0.02)
        connector_s = time.perf_counter() - committed

        conn = pg.connect()
        cur = conn.cursor()
        started = time.perf_counter()
        cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes('raw', NULL, NULL, "
                    "'proto_version', '1', 'publication_names', 'raw')")
        payloads = [bytes(d) for (d,) in cur.fetchall()]
        raw_s = time.perf_counter() - started
        conn.close()
        started = time.perf_counter()
        for payload in payloads:
            pgoutput.decode(payload)
        decode_s = time.perf_counter() - started

        # the same events produced straight from memory: what the broker and client take alone
        events = [(m.key(), m.value()) for m in sample_events(broker.bootstrap, args.rows)]
        producer = new_producer(broker.bootstrap)
        started = time.perf_counter()
        for key, value in events:
            while True:
                try:
                    producer.produce("bench.replay", value=value, key=key)
                    break
                except BufferError:
                    producer.poll(0.1)
        producer.flush()
        produce_s = time.perf_counter() - started

        # 2. latency: --rate single-row commits per second; receive time minus commit time
        latency = measure_latency(pg, broker.bootstrap, args.rows, args.rate, args.seconds)
        consumer.close()
    finally:
        if connector is not None:
            connector.terminate()
            connector.wait(30)
        broker.stop()
        pg.stop()

    rows = [
        ("PostgreSQL pg_logical_slot_get_binary_changes (peer)", f"{args.rows / raw_s:,.0f} changes/s", f"{raw_s:.2f} s"),
        ("headwater pgoutput decoder alone (same bytes)", f"{len(payloads) / decode_s:,.0f} msgs/s", f"{decode_s:.2f} s"),
        ("confluent-kafka producer alone, same events (peer)", f"{args.rows / produce_s:,.0f} events/s", f"{produce_s:.2f} s"),
        ("headwater cdc postgres: commit -> acked in topic", f"{args.rows / connector_s:,.0f} events/s", f"{connector_s:.2f} s"),
        (f"commit-to-topic latency at {args.rate} commits/s, p50", f"{latency[0]:.1f} ms", f"{latency[2]} samples"),
        (f"commit-to-topic latency at {args.rate} commits/s, p99", f"{latency[1]:.1f} ms", ""),
    ]
    width = max(len(r[0]) for r in rows)
    print(f"CDC bench: {args.rows} inserts in one transaction, 3 partitions, acks=all, idempotent producer, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'measure':<{width}}  {'rate':>18}  {'time':>12}")
    for name, rate, took in rows:
        print(f"{name:<{width}}  {rate:>18}  {took:>12}")


def sample_events(bootstrap, count):
    """The connector's own events, read back from the topic."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-sample"})
    parts = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in parts])
    events = []
    while len(events) < count:
        events += [m for m in consumer.consume(min(1000, count - len(events)), 1.0) if not m.error()]
    consumer.close()
    return events[:count]


def measure_latency(pg, bootstrap, first_id, rate, seconds):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "fetch.wait.max.ms": 10})
    parts = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    consumer.assign([TopicPartition(TOPIC, p, consumer.get_watermark_offsets(TopicPartition(TOPIC, p))[1])
                     for p in parts])
    commit_times, receive_times = {}, {}
    done = threading.Event()

    def receive():
        while not done.is_set() or len(receive_times) < len(commit_times):
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error() and msg.value() is not None:
                receive_times[json.loads(msg.key())["id"]] = time.perf_counter()

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    conn = pg.connect()
    cur = conn.cursor()
    interval, next_at = 1 / rate, time.perf_counter()
    for i in range(int(rate * seconds)):
        key = first_id + 1 + i
        cur.execute("INSERT INTO item VALUES (%s, 'x')", (key,))
        commit_times[key] = time.perf_counter()
        next_at += interval
        time.sleep(max(0, next_at - time.perf_counter()))
    conn.close()
    done.set()
    reader.join(60)
    consumer.close()
    lat = sorted((receive_times[k] - t) * 1000 for k, t in commit_times.items() if k in receive_times)
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1], len(lat)


if __name__ == "__main__":
    main()
