"""CDC speed: change events/s into the topic next to PostgreSQL's own logical decoding rate
for the same changes, for rows of several sizes in one large transaction and in many
single-row transactions; and commit-to-topic latency at a moderate write rate.

    .venv/bin/python bench/cdc_throughput.py [--rows 50000] [--rate 200] [--seconds 5] [--smoke]

Starts a throw-away PostgreSQL cluster (`headwater.testing.PostgresServer`), a Headwater broker, and
`headwater cdc postgres` as a child process, all on loopback. For each workload the connector is
paused (SIGSTOP) while PostgreSQL writes it, then resumed: the time from resuming to the last
event acknowledged in the topic is set against `pg_logical_slot_get_binary_changes` decoding
the very same changes from a second slot, so both sides read the same backlog.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from headwater.testing import PostgresServer, bench_arguments, cpu_seconds, start_broker, wait_until

# (table, approximate row size, payload expression, single-row transactions?)
WORKLOADS = [
    ("small_one_txn", 100, "md5(g::text)", False),
    ("small_many_txn", 100, "md5(g::text)", True),
    ("medium_one_txn", 1_000, "repeat(md5(g::text), 30)", False),
    ("medium_many_txn", 1_000, "repeat(md5(g::text), 30)", True),
    ("large_one_txn", 10_000, "repeat(md5(g::text), 300)", False),
]
LATENCY_TABLE = "small_one_txn"
PARTITIONS = 3


def topic(table: str) -> str:
    return f"bench.public.{table}"


def topic_size(consumer, table):
    return sum(consumer.get_watermark_offsets(TopicPartition(topic(table), p), timeout=10)[1] for p in range(PARTITIONS))


def write(pg, table, payload, rows, one_per_txn):
    """`rows` inserts: in one statement, or each in its own transaction (a DO loop that commits)."""
    if one_per_txn:
        pg.execute(f"DO $$ BEGIN FOR g IN 1..{rows} LOOP INSERT INTO {table} VALUES (g, {payload}); "
                   "COMMIT; END LOOP; END $$")
    else:
        pg.execute(f"INSERT INTO {table} SELECT g, {payload} FROM generate_series(1, {rows}) g")


def postgres_decoding(pg) -> float:
    """Seconds PostgreSQL takes to decode the `raw` slot's backlog and hand over its pgoutput messages."""
    conn = pg.connect()
    try:
        cur = conn.cursor()
        started = time.perf_counter()
        cur.execute("SELECT data FROM pg_logical_slot_get_binary_changes('raw', NULL, NULL, "
                    "'proto_version', '1', 'publication_names', 'raw')")
        cur.fetchall()  # the pgoutput messages, in the client as the connector gets them
        return time.perf_counter() - started
    finally:
        conn.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=50_000,
                        help="rows of ~100 B per workload (of the larger rows: as many as make 4x their bytes)")
    parser.add_argument("--rate", type=int, default=200, help="commits/s for the latency run")
    parser.add_argument("--seconds", type=float, default=5, help="length of the latency run")
    args = bench_arguments(parser, {"rows": 500, "rate": 20, "seconds": 1})

    pg = PostgresServer()
    tmp = Path(tempfile.mkdtemp(prefix="headwater-bench-"))
    broker = start_broker(tmp / "data", "--num-partitions", str(PARTITIONS))
    connector = None
    results = []
    try:
        tables = [w[0] for w in WORKLOADS]
        for table in tables:
            pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, payload text)")
        pg.execute(f"CREATE PUBLICATION raw FOR TABLE {', '.join(tables)}")
        connector = subprocess.Popen(
            [sys.executable, "-m", "headwater", "cdc", "postgres", "--dsn", pg.dsn, "--tables", ",".join(tables),
             "--topic-prefix", "bench", "--bootstrap-server", broker.bootstrap, "--status-interval", "3600"],
            stderr=open(tmp / "connector.log", "ab"))
        wait_until(lambda: pg.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'headwater' "
                                      "AND active")[0][0] == 1)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench"})
        # Warm up: every topic exists and the producer knows its partitions before any timing.
        for table in tables:
            pg.execute(f"INSERT INTO {table} VALUES (0, 'warm-up')")
        for table in tables:
            wait_until(lambda: topic(table) in consumer.list_topics(timeout=10).topics, 60, 0.05)
            wait_until(lambda: topic_size(consumer, table) >= 1, 60, 0.05)

        for table, size, payload, one_per_txn in WORKLOADS:
            rows = max(10, args.rows * 400 // size) if size > 100 else args.rows
            pg.execute("SELECT pg_create_logical_replication_slot('raw', 'pgoutput')")
            connector.send_signal(signal.SIGSTOP)
            try:
                write(pg, table, payload, rows, one_per_txn)
            finally:
                connector.send_signal(signal.SIGCONT)
            resumed, cpu = time.perf_counter(), [cpu_seconds(p.pid) for p in (connector, broker.proc)]
            wait_until(lambda: topic_size(consumer, table) >= rows + 1, 300, 0.02)
            connector_s = time.perf_counter() - resumed
            cpu = [(cpu_seconds(p.pid) - before) * 1e6 / rows for p, before in zip((connector, broker.proc), cpu)]
            postgres_s = postgres_decoding(pg)
            pg.execute("SELECT pg_drop_replication_slot('raw')")
            shape = "single-row transactions" if one_per_txn else "one transaction"
            results.append((f"~{size:,} B rows, {shape}", rows, rows / postgres_s, rows / connector_s, *cpu))

        latency = measure_latency(pg, broker.bootstrap, args.rows, args.rate, args.seconds)
        consumer.close()
    finally:
        if connector is not None:
            connector.terminate()
            connector.wait(30)
        broker.stop()
        pg.stop()

    print(f"CDC bench: {PARTITIONS} partitions, acks=all, idempotent producer, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    head = ("workload", "events", "PostgreSQL decoding (peer)", "headwater cdc: acked in topic", "ratio",
            "CPU/event: connector", "broker")
    width = max(len(head[0]), *(len(r[0]) for r in results))
    print(f"{head[0]:<{width}}  {head[1]:>7}  {head[2]:>26}  {head[3]:>29}  {head[4]:>5}  {head[5]:>20}  {head[6]:>7}")
    for name, rows, postgres_rate, connector_rate, connector_cpu, broker_cpu in results:
        print(f"{name:<{width}}  {rows:>7}  {postgres_rate:>22,.0f} ev/s  {connector_rate:>25,.0f} ev/s  "
              f"{connector_rate / postgres_rate:>5.2f}  {connector_cpu:>17.1f} µs  {broker_cpu:>4.1f} µs")
    print(f"commit-to-topic latency at {args.rate} single-row commits/s: p50 {latency[0]:.1f} ms, "
          f"p99 {latency[1]:.1f} ms ({latency[2]} samples)")


def measure_latency(pg, bootstrap, first_id, rate, seconds):
    name = topic(LATENCY_TABLE)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "fetch.wait.max.ms": 10})
    parts = consumer.list_topics(name, timeout=10).topics[name].partitions
    consumer.assign([TopicPartition(name, p, consumer.get_watermark_offsets(TopicPartition(name, p))[1])
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
        cur.execute(f"INSERT INTO {LATENCY_TABLE} VALUES (%s, 'x')", (key,))
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
