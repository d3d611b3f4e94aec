"""CDC speed: change events/s into the topic next to PostgreSQL's own logical decoding rate
and next to Debezium's PostgreSQL connector for the same changes, for rows of several sizes in
one large transaction and in many single-row transactions; and commit-to-topic latency at a
moderate write rate.

    .venv/bin/python bench/cdc_throughput.py [--rows 50000] [--rate 200] [--seconds 5] [--smoke]

Starts a throw-away PostgreSQL cluster (`headwater.testing.PostgresServer`), a Headwater broker, and
`headwater cdc postgres` as a child process, all on loopback. For each workload the connector is
paused (SIGSTOP) while PostgreSQL writes it, then resumed: the time from resuming to the last
event acknowledged in the topic is set against `pg_logical_slot_get_binary_changes` decoding
the very same changes from a second slot, so both sides read the same backlog.

The peer connector is Debezium 3.6's PostgreSQL connector in Debezium's embedded engine
(jvm/debezium/.../DebeziumToKafka.java, resolved by `make jvm`), writing JSON change events
into the same broker with a KafkaProducer (acks=all, idempotent, batching as the Headwater
connector's producer does), a batch's offsets marked processed once the broker acknowledged it,
as Debezium Server's Kafka sink does. Before any timing both connectors carry a warm-up of
`--rows` small rows, so the JVM's compiler has done its work.
It has a slot of its own (pgoutput) and is paused with the Headwater connector while
PostgreSQL writes; it is resumed once the Headwater connector is done, and timed the same way.
PostgreSQL's `wal_sender_timeout` is turned off so the paused connectors keep their slots'
connections.
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from headwater.testing import (PostgresServer, bench_arguments, bench_workdir, cpu_seconds, peer_command, start_broker,
                               wait_until)

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


# The topic prefixes of the two connectors.
HEADWATER, DEBEZIUM = "bench", "debezium"


def topic(table: str, prefix: str = HEADWATER) -> str:
    return f"{prefix}.public.{table}"


def topic_size(consumer, table, prefix=HEADWATER):
    return sum(consumer.get_watermark_offsets(TopicPartition(topic(table, prefix), p), timeout=10)[1]
               for p in range(PARTITIONS))


def start_debezium(pg, bootstrap: str, tables: list[str], log: Path) -> subprocess.Popen:
    command = peer_command("debezium", "headwater-jvm-debezium", "headwater.jvm.DebeziumToKafka", bootstrap,
                           "127.0.0.1", str(pg.port), "postgres", "postgres",
                           ",".join(f"public.{table}" for table in tables), DEBEZIUM, DEBEZIUM)
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(log, "ab"))


def drain(consumer, table, prefix, rows, proc, broker) -> tuple[float, float, float]:
    """Resumes the paused connector `proc`; events/s until its topic holds `rows` more events, and
    the CPU µs per event it and the broker spent meanwhile."""
    procs = (proc, broker.proc)
    start, cpu = time.perf_counter(), [cpu_seconds(p.pid) for p in procs]
    before = topic_size(consumer, table, prefix)
    proc.send_signal(signal.SIGCONT)
    wait_until(lambda: topic_size(consumer, table, prefix) >= before + rows, 300, 0.02)
    rate = rows / (time.perf_counter() - start)
    return (rate, *((cpu_seconds(p.pid) - first) * 1e6 / rows for p, first in zip(procs, cpu)))


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
    tmp = bench_workdir("headwater-bench-")
    broker = start_broker(tmp / "data", "--num-partitions", str(PARTITIONS))
    connector = debezium = None
    results = []
    try:
        tables = [w[0] for w in WORKLOADS]
        for table in tables:
            pg.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, payload text)")
        pg.execute(f"CREATE PUBLICATION raw FOR TABLE {', '.join(tables)}")
        pg.execute("ALTER SYSTEM SET wal_sender_timeout = 0")
        pg.execute("SELECT pg_reload_conf()")
        connector = subprocess.Popen(
            [sys.executable, "-m", "headwater", "cdc", "postgres", "--dsn", pg.dsn, "--tables", ",".join(tables),
             "--topic-prefix", "bench", "--bootstrap-server", broker.bootstrap, "--status-interval", "3600"],
            stderr=open(tmp / "connector.log", "ab"))
        debezium = start_debezium(pg, broker.bootstrap, tables, tmp / "debezium.log")
        wait_until(lambda: pg.execute("SELECT count(*) FROM pg_replication_slots WHERE slot_name IN "
                                      f"('headwater', '{DEBEZIUM}') AND active")[0][0] == 2, 120)
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench"})
        # Warm up: every topic exists and the producer knows its partitions before any timing.
        for table in tables:
            pg.execute(f"INSERT INTO {table} VALUES (0, 'warm-up')")
        for table in tables:
            for prefix in (HEADWATER, DEBEZIUM):
                wait_until(lambda: topic(table, prefix) in consumer.list_topics(timeout=10).topics, 60, 0.05)
                wait_until(lambda: topic_size(consumer, table, prefix) >= 1, 60, 0.05)
        # The JVM's compiler warms up on `--rows` rows of negative ids, clear of the workloads'.
        warm = WORKLOADS[0][0]
        pg.execute(f"INSERT INTO {warm} SELECT -g, 'warm-up' FROM generate_series(1, {args.rows}) g")
        for prefix in (HEADWATER, DEBEZIUM):
            wait_until(lambda: topic_size(consumer, warm, prefix) >= args.rows + 1, 300, 0.05)

        for table, size, payload, one_per_txn in WORKLOADS:
            rows = max(10, args.rows * 400 // size) if size > 100 else args.rows
            pg.execute("SELECT pg_create_logical_replication_slot('raw', 'pgoutput')")
            connector.send_signal(signal.SIGSTOP)
            debezium.send_signal(signal.SIGSTOP)
            write(pg, table, payload, rows, one_per_txn)   # (on failure the finally below resumes them)
            headwater_run = drain(consumer, table, HEADWATER, rows, connector, broker)
            debezium_run = drain(consumer, table, DEBEZIUM, rows, debezium, broker)
            postgres_s = postgres_decoding(pg)
            pg.execute("SELECT pg_drop_replication_slot('raw')")
            shape = "single-row transactions" if one_per_txn else "one transaction"
            results.append((f"~{size:,} B rows, {shape}", rows, rows / postgres_s, headwater_run, debezium_run))

        latency = measure_latency(pg, broker.bootstrap, args.rows, args.rate, args.seconds)
        consumer.close()
    finally:
        for proc in (connector, debezium):
            if proc is not None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
                proc.wait(30)
        broker.stop()
        pg.stop()

    print(f"CDC bench: {PARTITIONS} partitions, acks=all, idempotent producers, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    head = ("workload", "events", "PostgreSQL decoding", "headwater cdc", "/ PG", "Debezium", "headwater / Debezium",
            "CPU µs/event: headwater", "Debezium", "broker (hw / Dbz)")
    rows = [(name, f"{events}", f"{postgres_rate:,.0f} ev/s", f"{hw[0]:,.0f} ev/s", f"{hw[0] / postgres_rate:.2f}",
             f"{dbz[0]:,.0f} ev/s", f"{hw[0] / dbz[0]:.2f}", f"{hw[1]:.1f}", f"{dbz[1]:.1f}", f"{hw[2]:.1f} / {dbz[2]:.1f}")
            for name, events, postgres_rate, hw, dbz in results]
    widths = [max(len(row[i]) for row in (head, *rows)) for i in range(len(head))]
    for row in (head, *rows):
        print("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    for prefix, name in ((HEADWATER, "headwater cdc"), (DEBEZIUM, "Debezium")):
        p50, p99, samples = latency[prefix]
        print(f"{name}: commit-to-topic latency at {args.rate} single-row commits/s: p50 {p50:.1f} ms, "
              f"p99 {p99:.1f} ms ({samples} samples)")


def measure_latency(pg, bootstrap, first_id, rate, seconds):
    """Commit-to-topic latency of single-row commits at `rate`/s, for each connector: {prefix: (p50 ms, p99 ms, samples)}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency", "fetch.wait.max.ms": 10})
    assignment = []
    for prefix in (HEADWATER, DEBEZIUM):
        name = topic(LATENCY_TABLE, prefix)
        parts = consumer.list_topics(name, timeout=10).topics[name].partitions
        assignment += [TopicPartition(name, p, consumer.get_watermark_offsets(TopicPartition(name, p))[1]) for p in parts]
    consumer.assign(assignment)
    commit_times = {}
    receive_times = {HEADWATER: {}, DEBEZIUM: {}}
    done = threading.Event()

    def receive():
        while not done.is_set() or any(len(times) < len(commit_times) for times in receive_times.values()):
            msg = consumer.poll(0.1)
            if msg is not None and not msg.error() and msg.value() is not None:
                receive_times[msg.topic().split(".")[0]][json.loads(msg.key())["id"]] = time.perf_counter()

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
    figures = {}
    for prefix, received in receive_times.items():
        lat = sorted((received[k] - t) * 1000 for k, t in commit_times.items() if k in received)
        figures[prefix] = (statistics.median(lat), lat[int(len(lat) * 0.99) - 1], len(lat))
    return figures


if __name__ == "__main__":
    main()
