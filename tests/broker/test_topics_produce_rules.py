"""Per-topic rules a produce must pass: keys on compacted topics, max.message.bytes, and
the broker's clock on LogAppendTime topics, seen through real producers and consumers."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer
from kafka.errors import InvalidRecordError, MessageSizeTooLargeError

from tests.support.clients import confluent_consume


def _create(broker, name, **configs):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=configs)])[name].result(30)


def _end_offset(broker, topic):
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
    finally:
        consumer.close()


def _confluent_send(broker, topic, key, value, **config):
    """Produce one message; returns (error or None, delivered message)."""
    outcome = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, **config})
    producer.produce(topic, key=key, value=value, on_delivery=lambda err, msg: outcome.append((err, msg)))
    assert producer.flush(30) == 0
    return outcome[0]


@pytest.mark.parametrize("idempotent", [False, True])
def test_compacted_topic_refuses_records_without_a_key(broker, idempotent):
    _create(broker, "profiles", **{"cleanup.policy": "compact"})
    err, _ = _confluent_send(broker, "profiles", b"alice", b"v1", **{"enable.idempotence": idempotent})
    assert err is None
    err, _ = _confluent_send(broker, "profiles", None, b"no key", **{"enable.idempotence": idempotent})
    assert err is not None and err.name() == "INVALID_RECORD"

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0)
    with pytest.raises(InvalidRecordError) as refused:
        producer.send("profiles", value=b"no key either").get(timeout=30)
    assert "without a key" in str(refused.value)  # the broker's error message (librdkafka drops it)
    producer.send("profiles", key=b"bob", value=b"v1").get(timeout=30)
    producer.close()

    got = confluent_consume(broker.bootstrap, "profiles", [0], 2)
    assert [(offset, key, value) for _, offset, key, value, _ in got] == [(0, b"alice", b"v1"), (1, b"bob", b"v1")]
    assert _end_offset(broker, "profiles") == 2


def test_max_message_bytes_per_topic(broker):
    _create(broker, "small", **{"max.message.bytes": "2000"})
    err, _ = _confluent_send(broker, "small", b"k", b"x" * 5000, **{"compression.type": "none"})
    assert err is not None and err.name() == "MSG_SIZE_TOO_LARGE"
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, retries=0, max_request_size=100000)
    with pytest.raises(MessageSizeTooLargeError):
        producer.send("small", key=b"k", value=b"y" * 5000).get(timeout=30)
    producer.send("small", key=b"k", value=b"z" * 500).get(timeout=30)
    producer.close()
    assert _end_offset(broker, "small") == 1
    # Another topic keeps the broker's default limit.
    err, _ = _confluent_send(broker, "large", b"k", b"x" * 5000)
    assert err is None


def test_log_append_time_stamps_with_the_broker_clock(broker):
    _create(broker, "stamped", **{"message.timestamp.type": "LogAppendTime"})
    client_time = 1_000_000_000_000  # 2001: far from now
    before = int(time.time() * 1000)
    outcome = []
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    producer.produce("stamped", key=b"k", value=b"v", timestamp=client_time,
                     on_delivery=lambda err, msg: outcome.append((err, msg)))
    producer.flush(30)
    kp = KafkaProducer(bootstrap_servers=broker.bootstrap)
    meta = kp.send("stamped", key=b"k2", value=b"v2", timestamp_ms=client_time).get(timeout=30)
    kp.close()
    after = int(time.time() * 1000)

    err, msg = outcome[0]
    assert err is None
    kind, stamp = msg.timestamp()  # from the produce response's log_append_time_ms
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
    assert before <= meta.timestamp <= after

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "stamps"})
    consumer.assign([TopicPartition("stamped", 0, 0)])
    seen = []
    deadline = time.monotonic() + 30
    while len(seen) < 2 and time.monotonic() < deadline:
        seen += [m for m in consumer.consume(10, 1.0) if not m.error()]
    consumer.close()
    assert [m.key() for m in seen] == [b"k", b"k2"]
    for m in seen:
        kind, stamp = m.timestamp()
        assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= stamp <= after
