"""Log cleaner throughput, and what a running cleaner costs concurrent producers.

    .venv/bin/python bench/cleaner.py [--records N] [--keys K] [--seconds S] [--smoke]

1. The cleaner alone, in-process on the storage engine: a compacted log of N records over
   K keys (100-byte values, batches of 500) is written, its segments closed, and one
   ``LogManager.clean`` pass timed; MB/s is log bytes read per second of the pass, per codec,
   and per CPU second of the pass (what a busy machine's wall clock hides).
2. A broker subprocess: confluent-kafka produce msg/s to a plain topic for S seconds,
   while a compacted backlog on the same broker waits (min.compaction.lag.ms high) and
   while the cleaner (in the broker's worker process) works through it (the lag lowered to
   0 as the clock starts); the pass's MB/s is from its duration in the broker's log. A small
   compacted topic is cleaned first, so the worker process is running, as in any broker
   that has cleaned before.
   Produce "while running" stops when the pass ends, so every message counted competed with it.
There is no peer: no Kafka (JVM) broker can be installed here to run its cleaner beside ours.
"""
from __future__ import annotations

import argparse
import itertools
import random
import re
import tempfile
import time
from itertools import islice
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from rich.console import Console

from headwater.log import LogConfig, LogManager
from headwater.records import Compression, Record, encode_batch
from headwater.testing import BrokerProcess, bench_arguments, produce_all

from tables import table  # bench/tables.py

BATCH = 500
console = Console(stderr=True)


def updates(records: int, keys: int):
    """(key, value) updates spread over `keys` keys; 100-byte values, half random (so codecs
    compress them about 2:1, not 50:1 as a repeated byte would)."""
    rng = random.Random(1)
    for i in range(records):
        yield b"key-%06d" % (i * 7919 % keys), rng.randbytes(50) + b"v" * 50


def compacted_batches(records: int, keys: int, codec: Compression):
    """Encoded batches of `updates`, offsets from 0."""
    now = int(time.time() * 1000) - 60_000
    stream = enumerate(updates(records, keys))
    for start in range(0, records, BATCH):
        batch = [Record(i, now, key, value) for i, (key, value) in islice(stream, BATCH)]
        yield encode_batch(batch, base_offset=start, compression=codec)


def cleaner_alone(records: int, keys: int, codec: Compression) -> dict:
    with tempfile.TemporaryDirectory(prefix="hw-cleaner-bench-") as tmp:
        logs = LogManager(Path(tmp), LogConfig())
        topic = logs.create_topic("bench", 1, {"cleanup.policy": "compact", "segment.bytes": str(1 << 20)})
        log = topic.partitions[0]
        for batch in compacted_batches(records, keys, codec):
            log.append(bytearray(batch))
        log.roll()  # everything written becomes cleanable
        before = log.size_bytes
        start, cpu = time.perf_counter(), time.process_time()
        stats = logs.clean(int(time.time() * 1000))
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        after = log.size_bytes
        logs.close()
    return {"codec": codec.name.lower(), "records": f"{records:,}", "log MB": f"{before / 1e6:.1f}",
            "after MB": f"{after / 1e6:.2f}", "seconds": f"{elapsed:.2f}",
            "MB/s compacted": f"{stats.bytes_read / 1e6 / elapsed:.1f}",
            "MB/s CPU": f"{stats.bytes_read / 1e6 / cpu:.1f}",
            "records/s": f"{records / elapsed:,.0f}"}


def produce(broker: BrokerProcess, topic: str, seconds: float, stop=lambda: False) -> dict:
    """Produce for `seconds`, or until `stop()` (asked every 10,000 messages): msg/s, and the
    broker process's CPU time per message (which other load on a shared machine disturbs far
    less than the rate; the cleaner's worker is another process and not counted)."""
    cpu = broker.cpu_seconds()
    rate, sent = produce_rate(broker.bootstrap, topic, seconds, stop)
    return {"msg/s (100 B, acks=1)": f"{rate:,.0f}",
            "broker CPU µs/msg": f"{(broker.cpu_seconds() - cpu) / sent * 1e6:.2f}"}


def produce_rate(bootstrap: str, topic: str, seconds: float, stop) -> tuple[float, int]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5, "enable.idempotence": False,
                         "queue.buffering.max.messages": 1_000_000})
    producer.produce(topic, b"warm-up")
    producer.flush(30)
    start = time.perf_counter()

    def values():
        for sent in itertools.count():
            if time.perf_counter() - start >= seconds or (sent and sent % 10_000 == 0 and stop()):
                return
            yield b"x" * 100

    sent = produce_all(producer, topic, values())
    producer.flush(120)
    return sent / (time.perf_counter() - start), sent


def set_lag(admin: AdminClient, topic: str, lag_ms: int) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", str(lag_ms), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)


def fill_backlog(bootstrap: str, topic: str, records: int, keys: int, segment_bytes: int) -> None:
    # Batches well below a segment, so the backlog spans closed (cleanable) segments.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "compression.type": "lz4",
                         "batch.size": segment_bytes // 4, "queue.buffering.max.messages": 1_000_000})
    for_values, for_keys = itertools.tee(updates(records, keys))   # consumed in step: a pair buffered at most
    produce_all(producer, topic, (value for _, value in for_values), keys=(key for key, _ in for_keys))
    producer.flush(120)


CLEANED = re.compile(r"^\S+ \S+ \w+ headwater.broker: log cleaner: .* (\d+) -> (\d+) bytes.* in ([\d.]+) s$", re.M)


def pass_logged(log_file: Path, offset: int) -> tuple[int, int, float] | None:
    """(bytes read, bytes written, seconds) of the first cleaner pass logged after `offset` in the broker log."""
    with open(log_file) as f:
        f.seek(offset)
        found = CLEANED.search(f.read())
    if not found:
        return None
    return int(found.group(1)), int(found.group(2)), float(found.group(3))


def wait_for_pass(log_file: Path, offset: int, timeout: float = 600) -> tuple[int, int, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := pass_logged(log_file, offset):
            return found
        time.sleep(0.05)
    raise RuntimeError("the cleaner pass did not finish")


def cleaner_vs_producers(records: int, keys: int, seconds: float, segment_bytes: int) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="hw-cleaner-bench-") as tmp:
        with BrokerProcess(Path(tmp) / "data", "--cleaner-interval-ms", "100") as broker:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            backlog = {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes),
                       "min.compaction.lag.ms": str(3600_000)}
            warm_up = {"cleanup.policy": "compact", "segment.bytes": "1024", "min.compaction.lag.ms": "0"}
            futures = admin.create_topics([NewTopic("backlog", 1, 1, config=backlog), NewTopic("events", 1, 1),
                                           NewTopic("warm-up", 1, 1, config=warm_up)])
            for future in futures.values():
                future.result(30)
            console.print(f"filling a compacted backlog of {records:,} records...")
            fill_backlog(broker.bootstrap, "backlog", records, keys, segment_bytes)
            # A broker that has cleaned before has its cleaner's worker process running: so has this one.
            offset = broker.log_file.stat().st_size
            fill_backlog(broker.bootstrap, "warm-up", 200, 2, 1024)
            wait_for_pass(broker.log_file, offset)
            time.sleep(1)
            rows.append({"produce while": "cleaner idle", **produce(broker, "events", seconds), "cleaner pass": "-"})
            offset = broker.log_file.stat().st_size
            set_lag(admin, "backlog", 0)  # the next pass (within 100 ms) takes the whole backlog
            running = produce(broker, "events", seconds, lambda: pass_logged(broker.log_file, offset))
            read, written, took = wait_for_pass(broker.log_file, offset)
            rows.append({"produce while": "cleaner running", **running,
                         "cleaner pass": f"{read / 1e6:.1f} -> {written / 1e6:.2f} MB in {took:.1f} s, "
                                         f"{read / 1e6 / took:.1f} MB/s"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--segment-bytes", type=int, default=1 << 20,
                        help="segment size of the broker's backlog topic: only closed segments are cleaned")
    args = bench_arguments(parser, {"records": 2000, "keys": 100, "seconds": 1, "segment_bytes": 16 << 10})
    out = Console()
    alone = [cleaner_alone(args.records, args.keys, codec)
             for codec in (Compression.NONE, Compression.LZ4, Compression.ZSTD)]
    out.print(table(f"log cleaner, one pass ({args.keys:,} keys, 100-byte values)", alone))
    out.print(table("produce throughput with the cleaner idle and running",
                    cleaner_vs_producers(args.records, args.keys, args.seconds, args.segment_bytes)))


if __name__ == "__main__":
    main()
