"""HTTP next to the Kafka protocol, in one run: records/s produced through the HTTP API
(REST Proxy v3 records:batch, batches of 100, one keep-alive connection; with
`--http-connections N` also N at once, a process each, whose requests share fsync rounds)
next to a native confluent-kafka producer; and records/s delivered by `headwater push` to a
local webhook endpoint, one record per POST and in batches (`--batch-size`), next to a native
confluent-kafka consumer group reading the same records.

    .venv/bin/python bench/push.py [--records 20000] [--max-in-flight 64] [--batch-size 100] [--http-only] [--http-keyless] [--http-connections N] [--smoke]

The endpoint (aiohttp, loopback, in this process) acknowledges every POST. Push delivery pays
one HTTP request per record (or per batch) plus JSON and base64; the native consumer gets batches. One
Headwater broker on loopback; no Kafka or Pub/Sub peer is available on this machine.
"""
import argparse
import itertools
import base64
import http.client
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

import orjson
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console

from headwater.push.receiver import WebhookReceiver
from headwater.testing import bench_arguments, produce_all, start_broker, wait_until

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tables import table  # noqa: E402

VALUE = b"v" * 200


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    produce_all(producer, topic, itertools.repeat(VALUE, count), keys=(b"key-%d" % (i % 100) for i in range(count)),
                poll_every=1)
    producer.flush(60)


def http_produce(console_url: str, topic: str, count: int, batch: int = 100, keyed: bool = True) -> float:
    url = urllib.parse.urlsplit(console_url)
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=60)  # keep-alive
    connection.request("GET", "/v3/clusters")
    cluster = json.loads(connection.getresponse().read())["data"][0]["cluster_id"]
    value = {"type": "BINARY", "data": base64.b64encode(VALUE).decode()}
    start = time.perf_counter()
    for first in range(0, count, batch):
        entries = [{"id": str(i), "key": {"type": "STRING", "data": f"key-{i % 100}"}, "value": value} if keyed
                   else {"id": str(i), "value": value} for i in range(first, min(first + batch, count))]
        # orjson, as a client sending 37 KB bodies would: json.dumps took ~0.5 of the client's 0.6 ms a request
        connection.request("POST", f"/v3/clusters/{cluster}/topics/{topic}/records:batch",
                           orjson.dumps({"entries": entries}), {"Content-Type": "application/json"})
        answer = connection.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"HTTP {answer.status}: {answer.read()[:200]!r}")
        answer.read()
    elapsed = time.perf_counter() - start
    connection.close()
    return elapsed


def http_produce_parallel(console_url: str, topic: str, count: int, connections: int) -> float:
    """``http_produce`` from ``connections`` processes at once, ``count`` records in all."""
    shares = [count // connections + (i < count % connections) for i in range(connections)]
    with multiprocessing.Pool(connections) as pool:
        start = time.perf_counter()
        pool.starmap(http_produce, [(console_url, topic, share) for share in shares])
        return time.perf_counter() - start


def native_produce(bootstrap: str, topic: str, count: int) -> float:
    start = time.perf_counter()
    produce(bootstrap, topic, count)
    return time.perf_counter() - start


def native(bootstrap: str, topic: str, count: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-native", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    seen, start = 0, time.perf_counter()
    while seen < count:
        seen += sum(1 for m in consumer.consume(1000, 1.0) if not m.error())
    elapsed = time.perf_counter() - start
    consumer.close()
    return elapsed


def push(bootstrap: str, topic: str, count: int, max_in_flight: int, ordering: str, batch_size: int = 1) -> float:
    with WebhookReceiver() as receiver:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "headwater", "push", topic, receiver.url, "--from-beginning",
                                 "--group", f"bench-push-{ordering}-{batch_size}", "--max-in-flight",
                                 str(max_in_flight), "--ordering", ordering, "--batch-size", str(batch_size),
                                 "--bootstrap-server", bootstrap, "--log-level", "WARNING"],
                                env=os.environ)
        try:
            wait_until(lambda: len(receiver.acknowledged) >= count, timeout=600, interval=0.05, what="deliveries")
            elapsed = time.perf_counter() - start
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--max-in-flight", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=100, help="records per POST in the batched push row")
    parser.add_argument("--http-only", action="store_true", help="only the HTTP produce rows")
    parser.add_argument("--http-keyless", action="store_true",
                        help="HTTP records without keys (each request's on one partition) instead of 100 keys")
    parser.add_argument("--http-connections", type=int, default=1,
                        help="above 1: an HTTP produce row with this many connections at once, too")
    args = bench_arguments(parser, smoke={"records": 300, "batch_size": 20, "http_connections": 2})
    with tempfile.TemporaryDirectory() as tmp:
        broker = start_broker(Path(tmp) / "data", "--num-partitions", "4", "--http-listener", "127.0.0.1:0")
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("bench-http", 4)])["bench-http"].result(30)  # HTTP creates no topics
            rows = []
            for name, run in [("produce: native (confluent-kafka)", lambda: native_produce(broker.bootstrap, "bench",
                                                                                          args.records)),
                              ("produce: HTTP, batches of 100" + (", keyless" if args.http_keyless else ""),
                               lambda: http_produce(broker.console_url, "bench-http", args.records,
                                                    keyed=not args.http_keyless)),
                              *([(f"produce: HTTP, batches of 100, {args.http_connections} connections",
                                  lambda: http_produce_parallel(broker.console_url, "bench-http", args.records,
                                                                args.http_connections))]
                                if args.http_connections > 1 else []),
                              ("consume: native group (confluent-kafka)", lambda: native(broker.bootstrap, "bench",
                                                                                        args.records)),
                              (f"consume: push, parallel, {args.max_in_flight} in flight",
                               lambda: push(broker.bootstrap, "bench", args.records, args.max_in_flight, "none")),
                              (f"consume: push, ordering key, {args.max_in_flight} in flight",
                               lambda: push(broker.bootstrap, "bench", args.records, args.max_in_flight, "key")),
                              (f"consume: push, batches of {args.batch_size}, {args.max_in_flight} in flight",
                               lambda: push(broker.bootstrap, "bench", args.records, args.max_in_flight, "none",
                                            args.batch_size))]:
                if args.http_only and not name.startswith("produce: HTTP"):
                    continue
                seconds = run()
                rows.append({"path": name, "records": f"{args.records:,}", "seconds": f"{seconds:.2f}",
                             "records/s": f"{args.records / seconds:,.0f}"})
        finally:
            broker.stop()
    Console().print(table("HTTP next to the Kafka protocol (one broker, loopback)", rows))


if __name__ == "__main__":
    main()
