"""Real clients, driven the way their users drive them, for the integration tests."""
from __future__ import annotations

import os
import subprocess
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafka import KafkaConsumer, KafkaProducer, TopicPartition as KPTopicPartition

from headwater.testing import kafka_classpath

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def require_kafka_jars() -> None:
    """Kafka's jars from `make jvm`: without them a CI run fails, and only a run by hand skips."""
    try:
        kafka_classpath()
    except FileNotFoundError as missing:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(str(missing))


def sample_messages(n: int, keys: int = 17):
    """Deterministic (key, value, headers) triples with some binary bytes, a null key and a null value."""
    out = []
    for i in range(n):
        key = None if i % 101 == 0 else f"customer-{i % keys}".encode()
        value = None if i % 97 == 5 else bytes((i * 7 + j) % 256 for j in range(i % 50)) + f"#{i}".encode()
        out.append((key, value, [("seq", str(i).encode()), ("bin", b"\x00\xff")]))
    return out


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 (-1001 before its first commit), without joining the group."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        consumer.close()


def stable_end(bootstrap: str, topic: str, partition: int = 0) -> int:
    """A partition's end as a read_committed consumer sees it: the last stable offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_committed"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        consumer.close()


def confluent_produce(bootstrap, topic, messages, **config):
    """Produce with confluent-kafka; returns delivered (partition, offset, key, value, headers) in send order."""
    delivered, errors = [None] * len(messages), []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    for i, (key, value, headers) in enumerate(messages):
        def report(err, msg, i=i, headers=headers):  # delivery reports carry no headers: keep what was sent
            if err:
                errors.append(err)
            else:
                delivered[i] = (msg.partition(), msg.offset(), msg.key(), msg.value(), list(headers))
        producer.produce(topic, key=key, value=value, headers=headers, on_delivery=report)
        producer.poll(0)
    assert producer.flush(60) == 0, "undelivered messages"
    assert not errors, errors
    return delivered


def confluent_consume(bootstrap, topic, partitions, count, timeout=60, **config):
    """Read `count` messages from the beginning of the partitions (assign, no group protocol)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False, **config})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            assert not msg.error(), msg.error()
            got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), list(msg.headers() or [])))
    consumer.close()
    return got


def log_end_offsets(bootstrap, topic, partitions) -> int:
    """How many records the partitions hold (from offset 0), by their high watermarks."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    total = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    consumer.close()
    return total


def kafka_python_produce(bootstrap, topic, messages, **config):
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, **config)
    futures = [producer.send(topic, key=k, value=v, headers=h) for k, v, h in messages]
    producer.flush(60)
    out = []
    for (key, value, headers), fut in zip(messages, futures):
        meta = fut.get(timeout=60)
        out.append((meta.partition, meta.offset, key, value, headers))
    producer.close()
    return out


def kafka_python_consume(bootstrap, topic, partitions, count, timeout=60):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    tps = [KPTopicPartition(topic, p) for p in partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=1000).values():
            got.extend((r.partition, r.offset, r.key, r.value, list(r.headers)) for r in records)
    consumer.close()
    return got


def kcat(*args, input: bytes | None = None, timeout=60) -> bytes:
    result = subprocess.run(["kcat", *args], input=input, capture_output=True, timeout=timeout)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout

