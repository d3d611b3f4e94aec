"""What security costs: produce and consume throughput over PLAINTEXT (the peer), SSL and
SASL_SSL (SCRAM-SHA-512) side by side against one broker, and the time to set up a
connection (connect, authenticate, first Metadata answered) on each.

    .venv/bin/python bench/security.py [--messages 200000] [--size 100] [--connections 20] [--smoke]

One broker child process with a listener of each protocol; confluent-kafka (librdkafka) as
the client. Certificates come from `headwater certs`, the user from `headwater users`.
"""
import argparse
import itertools
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from rich.console import Console

from headwater.testing import BrokerProcess, bench_arguments, bench_workdir, produce_all
from tables import table

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")


def client_config(broker: BrokerProcess, protocol: str, certs: Path) -> dict:
    config = {"bootstrap.servers": f"127.0.0.1:{broker.listeners[protocol]}", "security.protocol": protocol}
    if protocol != "PLAINTEXT":
        config["ssl.ca.location"] = str(certs / "ca.pem")
    if protocol == "SASL_SSL":
        config.update({"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "bench", "sasl.password": "bench-pw"})
    return config


def produce(config: dict, topic: str, messages: int, size: int) -> float:
    producer = Producer({**config, "linger.ms": 5, "batch.size": 1_000_000})
    value = b"x" * size
    failures = []
    report = lambda err, msg: err is not None and failures.append(err)
    started = time.perf_counter()
    produce_all(producer, topic, itertools.repeat(value, messages), on_delivery=report)
    assert producer.flush(120) == 0
    if failures:
        raise SystemExit(f"{len(failures)} messages not delivered: {failures[0]}")
    return messages / (time.perf_counter() - started)


def consume(config: dict, topic: str, messages: int) -> float:
    consumer = Consumer({**config, "group.id": f"bench-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, started = 0, None  # timed from the first message: the group's join is not the protocol's cost
    deadline = time.monotonic() + 300
    while got < messages:
        if time.monotonic() > deadline:
            raise SystemExit(f"consumed {got} of {messages} messages in 300 s")
        for msg in consumer.consume(10_000, 10):
            if msg.error() is not None:
                raise SystemExit(f"consumer error: {msg.error()}")
            started = started or time.perf_counter()
            got += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return messages / elapsed


def setup_ms(config: dict, connections: int) -> float:
    """Median time from a new client to its first Metadata answer (TCP, TLS, SASL included)."""
    times = []
    for _ in range(connections):
        started = time.perf_counter()
        AdminClient(config).list_topics(timeout=30)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages produced and consumed per protocol")
    parser.add_argument("--size", type=int, default=100, help="value bytes")
    parser.add_argument("--connections", type=int, default=20, help="connections timed for setup")
    args = bench_arguments(parser, {"messages": 2000, "connections": 2})

    tmp = bench_workdir("headwater-bench-")
    certs, data = tmp / "certs", tmp / "data"
    headwater = [sys.executable, "-m", "headwater"]
    subprocess.run([*headwater, "certs", "--out", str(certs)], check=True, capture_output=True)
    subprocess.run([*headwater, "users", "create", "--offline", "--data-dir", str(data), "bench",
                    "--password", "bench-pw"], check=True, capture_output=True)
    # ACLs are checked on every request, part of the cost measured: bench over SASL, ANONYMOUS otherwise
    for principal in ("User:bench", "User:ANONYMOUS"):
        for resource in ("--topic", "--group"):
            subprocess.run([*headwater, "acls", "add", "--offline", "--data-dir", str(data), "--principal", principal,
                            "--operation", "ALL", resource, "*"], check=True, capture_output=True)
    listeners = [a for p in PROTOCOLS for a in ("--listener", f"{p}://127.0.0.1:0")]
    rows = []
    with BrokerProcess(data, *listeners, "--ssl-certfile", str(certs / "broker.pem"),
                       "--ssl-keyfile", str(certs / "broker.key"), "--flush", "never") as broker:
        for protocol in PROTOCOLS:
            config = client_config(broker, protocol, certs)
            topic = f"bench-{protocol.lower()}"
            produced = produce(config, topic, args.messages, args.size)
            consumed = consume(config, topic, args.messages)
            rows.append({"listener": protocol + (" (peer)" if protocol == "PLAINTEXT" else ""),
                         "produce msg/s": f"{produced:,.0f}", "consume msg/s": f"{consumed:,.0f}",
                         "connection setup ms (median)": f"{setup_ms(config, args.connections):.1f}"})
    Console().print(table(f"security: {args.messages:,} messages of {args.size} B per listener; "
                          "SASL_SSL is SCRAM-SHA-512 (8192 iterations)", rows))


if __name__ == "__main__":
    main()
