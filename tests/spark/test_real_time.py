"""Spark's real-time mode (`trigger(realTime=...)`, Spark 4.1+) over a Headwater broker: Spark's
own Kafka source and sink (`make jvm`; Headwater's Python source has no real-time mode), a
1-second tumbling window count updated at each event (a micro-batch query updates a window once
a batch), held to a plain-Python count, and events whose window the watermark has closed dropped
as a micro-batch query drops them. The suite's local[2] session runs it: real-time mode runs
every stage at once, here the source's one task and the one shuffle partition's."""
from __future__ import annotations

import time
from collections import Counter

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from pyspark.sql import functions as F
from tests.support.sparkdata import create_topic

from headwater.testing import BrokerProcess

pytestmark = pytest.mark.xdist_group("spark")
SECOND = 1000
T0 = 1_800_000_000_000   # event times in ms, from a whole second
# Read in the first real-time batch: the watermark afterwards is the newest, T0 + 5 s,
# minus the 1-second delay.
FIRST = [T0 + 100, T0 + 200, T0 + 900, T0 + 1_000, T0 + 1_500, T0 + 5_000]
WATERMARK = T0 + 4_000
# Read once two batches have ended (Spark drops late events by the watermark the batch before
# ran with), in this order: two in windows that ended at or before the watermark (dropped), one
# in the window that starts at it (counted).
LATER = [T0 + 2_500, WATERMARK - 1, WATERMARK]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("real-time") / "data") as proc:
        yield proc.bootstrap


def produce(bootstrap: str, topic: str, times: list[int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for ms in times:
        producer.produce(topic, b"e", timestamp=ms)
    assert producer.flush(30) == 0


def windows(times: list[int]) -> Counter:
    return Counter(ms // SECOND * SECOND for ms in times)


def per_event(times: list[int], before: Counter) -> list[tuple[int, int]]:
    """The updates of a window count updated at each event: (window start, count so far)."""
    counts, updates = Counter(before), []
    for ms in times:
        start = ms // SECOND * SECOND
        counts[start] += 1
        updates.append((start, counts[start]))
    return updates


def read_updates(consumer: Consumer, last: list[tuple[int, int]], query) -> list[tuple[int, int]]:
    """The updates (window start, count) read until `last` is among them."""
    updates = []
    deadline = time.monotonic() + 120
    while last[-1] not in updates and query.isActive and time.monotonic() < deadline:
        updates += [tuple(map(int, u.value().split(b","))) for u in consumer.consume(100, 0.2)]
    if not query.isActive:
        raise query.exception()
    return updates


def test_a_real_time_window_count_updates_per_event_and_drops_late_events(spark, kafka_connector, broker, tmp_path):
    create_topic(broker, "events", 1)
    create_topic(broker, "updates", 1)
    events = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", broker).option("subscribe", "events")
              .option("startingOffsets", "earliest").load())
    counts = (events.withWatermark("timestamp", "1 second").groupBy(F.window("timestamp", "1 second"))
              .agg(F.count(F.lit(1)).alias("n")))
    query = (counts.select(F.concat_ws(",", F.unix_millis("window.start"), "n").alias("value"))
             .writeStream.outputMode("update").format("kafka").option("kafka.bootstrap.servers", broker)
             .option("topic", "updates").option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(realTime="5 seconds").start())
    consumer = Consumer({"bootstrap.servers": broker, "group.id": "test", "enable.auto.commit": False})
    consumer.assign([TopicPartition("updates", 0, OFFSET_BEGINNING)])
    try:
        produce(broker, "events", FIRST)
        first = per_event(FIRST, Counter())
        assert read_updates(consumer, first, query) == first   # an update per event, not one per window

        while (query.lastProgress or {"batchId": -1})["batchId"] < 1:   # two batches end
            if not query.isActive:
                raise query.exception()
            time.sleep(0.1)
        produce(broker, "events", LATER)
        on_time = [ms for ms in LATER if ms // SECOND * SECOND + SECOND > WATERMARK]
        assert len(on_time) == 1
        later = per_event(on_time, windows(FIRST))
        assert read_updates(consumer, later, query) == later   # none for the late events before it
    finally:
        spark.sparkContext.setLogLevel("OFF")   # the interrupted long-running tasks log their aborted writes
        query.stop()
        spark.sparkContext.setLogLevel("ERROR")
        consumer.close()
