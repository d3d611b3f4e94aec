"""Retention seen from outside: the broker's background pass deletes old segments by size
and by age, the log start offset moves, and consumers whose position fell off the log get
the auto.offset.reset they configured."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
from kafka import KafkaConsumer, TopicPartition as KPTopicPartition
from kafka.errors import OffsetOutOfRangeError

from headwater.testing import wait_until

from tests.support.logview import create_topic, log_bytes, produce_rounds, read_all, watermarks

HOUR_MS = 3600 * 1000


@pytest.fixture
def retaining_broker(start_broker):
    return start_broker("--retention-check-interval-ms", "100")


def test_retention_by_bytes_keeps_disk_bounded(retaining_broker):
    bootstrap, topic = retaining_broker.bootstrap, "metrics"
    segment, retained = 8192, 32768
    create_topic(bootstrap, topic, **{"retention.bytes": str(retained), "segment.bytes": str(segment)})
    sent = []
    for r in range(12):  # ~60 KB a round, ~720 KB in all: 22 times what may stay
        sent += produce_rounds(bootstrap, topic, [[(b"host-%d" % (i % 7), b"%06d " % i * 40) for i in range(200)]],
                               **{"compression.type": "none", "batch.size": 4096})
        # Retention runs in the background: after each round the partition shrinks back under the bound.
        wait_until(lambda: log_bytes(retaining_broker.data_dir, topic) <= retained + segment,
                   what=f"retention after round {r}")
    start, end = watermarks(bootstrap, topic)
    assert end == len(sent) and start > len(sent) // 2
    assert read_all(bootstrap, topic) == sent[start:]  # what is left is the complete tail


def _expire_old_records(bootstrap, topic, segment_bytes=4096):
    """100 records stamped three hours ago, then 100 fresh ones; then retention.ms becomes one
    hour, so one background pass deletes every closed segment of old records. Returns
    (what was sent, the new log start offset)."""
    create_topic(bootstrap, topic, **{"retention.ms": "-1", "segment.bytes": str(segment_bytes)})
    old = int(time.time() * 1000) - 3 * HOUR_MS
    sent = produce_rounds(bootstrap, topic, [[(b"k", b"old click %d " % i * 5, old) for i in range(100)]])
    sent += produce_rounds(bootstrap, topic, [[(b"k", b"new click %d " % i * 5) for i in range(100)]])
    assert watermarks(bootstrap, topic)[0] == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("retention.ms", str(HOUR_MS), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    return sent, wait_until(lambda: watermarks(bootstrap, topic)[0], what="old segments to be deleted")


def test_retention_by_time_deletes_old_segments(retaining_broker):
    bootstrap, topic = retaining_broker.bootstrap, "clicks"
    sent, start = _expire_old_records(bootstrap, topic)
    # Whole segments go: old records may share the first kept segment with new ones, no more.
    assert 100 - 60 < start <= 100
    assert read_all(bootstrap, topic) == sent[start:]


@pytest.mark.parametrize("reset", ["earliest", "latest", "error"])
def test_confluent_consumer_position_off_the_log(retaining_broker, reset):
    bootstrap, topic = retaining_broker.bootstrap, f"expired-{reset}"
    _, start = _expire_old_records(bootstrap, topic)
    _, end = watermarks(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "late", "auto.offset.reset": reset,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 10)])  # offset 10 is gone
    if reset == "latest":  # nothing until something new arrives
        time.sleep(1)
        produce_rounds(bootstrap, topic, [[(b"k", b"after the reset")]])
    first = None
    deadline = time.monotonic() + 30
    while first is None and time.monotonic() < deadline:
        first = consumer.poll(0.5)
    consumer.close()
    assert first is not None
    if reset == "earliest":
        assert (first.error(), first.offset()) == (None, start)
    elif reset == "latest":
        assert (first.error(), first.offset(), first.value()) == (None, end, b"after the reset")
    else:
        assert first.error().code() == KafkaError._AUTO_OFFSET_RESET


@pytest.mark.parametrize("reset", ["earliest", "none"])
def test_kafka_python_consumer_position_off_the_log(retaining_broker, reset):
    bootstrap, topic = retaining_broker.bootstrap, f"expired-kp-{reset}"
    _, start = _expire_old_records(bootstrap, topic)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset=reset)
    tp = KPTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 10)
    try:
        if reset == "none":
            with pytest.raises(OffsetOutOfRangeError):
                for _ in range(20):
                    consumer.poll(timeout_ms=500)
        else:
            records = []
            deadline = time.monotonic() + 30
            while not records and time.monotonic() < deadline:
                records = [r for batch in consumer.poll(timeout_ms=500).values() for r in batch]
            assert records[0].offset == start
    finally:
        consumer.close()
