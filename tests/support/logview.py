"""What a consumer sees of a whole partition, and how big its log is on disk."""
from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap, name, partitions=1, **configs):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(30)


def produce_rounds(bootstrap, topic, rounds, **config):
    """Produce each round of (key, value[, timestamp]) and flush it, so every round is its own
    batch(es); returns the (offset, key, value) of everything sent, in offset order."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **config})
    sent, errors = [], []

    def report(err, msg):
        if err:
            errors.append(err)
        else:
            sent.append((msg.offset(), msg.key(), msg.value()))
    for messages in rounds:
        for key, value, *timestamp in messages:
            producer.produce(topic, key=key, value=value, on_delivery=report,
                             **({"timestamp": timestamp[0]} if timestamp else {}))
        assert producer.flush(60) == 0
    assert not errors, errors
    return sorted(sent)


def watermarks(bootstrap, topic, partition=0) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    finally:
        consumer.close()


def read_all(bootstrap, topic, partition=0, timeout=60) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record a consumer from `earliest` gets, up to the log end."""
    _, end = watermarks(bootstrap, topic, partition)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + timeout
    try:
        while (not got or got[-1][0] < end - 1) and end > 0:
            assert time.monotonic() < deadline, f"read {len(got)} records, last {got[-1:]}, end {end}"
            for msg in consumer.consume(1000, 0.5):
                assert not msg.error(), msg.error()
                got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got





def log_bytes(data_dir, topic, partition=0) -> int:
    return sum(p.stat().st_size for p in (data_dir / f"{topic}-{partition}").glob("*.log"))
