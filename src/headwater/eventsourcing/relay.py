"""The outbox relay: publishes the store's events to a Headwater topic in global-position
order, keyed by stream id, with no dual write (the events table is the outbox).

It keeps no checkpoint of its own: the topic is the record of what was published. Each
stream maps to one partition (CRC-32 of the stream id, as librdkafka's consistent
partitioner), and an idempotent producer keeps each partition gap-free and in order, so on
start the last event of each partition says exactly where that partition stands. A relay
killed at any moment resumes after it: nothing lost, nothing published twice.
"""
from __future__ import annotations

import time
import zlib
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.eventsourcing.store import EventStore
from headwater.eventsourcing.row_formats import JsonRows, RowFormat
from headwater.waiting import PROBE_TIMEOUT, client_log, never, wait_for_broker

TIMEOUT = 15
WAIT_TOLD_AFTER = 5  # unacknowledged flushes of PROBE_TIMEOUT s before the relay says it waits


class RelayError(Exception):
    """The broker refused or lost an event: the relay stops; a restart resumes after what is in the topic."""


def partition_for(stream_id: str, partitions: int) -> int:
    return zlib.crc32(stream_id.encode()) % partitions


class OutboxRelay:
    def __init__(self, store: EventStore, bootstrap: str, topic: str, partitions: int = 3, batch_size: int = 1000,
                 security: dict[str, str] | None = None, should_stop: Callable[[], bool] = never,
                 on_wait: Callable[[str], None] = lambda line: None, rows: RowFormat = JsonRows()):
        """``security``: librdkafka properties for a secured broker (security.protocol, sasl.*, ssl.*);
        ``rows``: the records' format (`row_formats.row_format`: JSON, or Avro with a schema registry).
        While the broker is down it waits (`on_wait` hears why, once) until `should_stop()`:
        then `headwater.waiting.Stopped`."""
        self.store, self.rows = store, rows
        self.client = {"bootstrap.servers": bootstrap, **(security or {}), "logger": client_log}
        self.topic = topic
        self.batch_size = batch_size
        self.should_stop, self.on_wait, self.bootstrap = should_stop, on_wait, bootstrap
        admin = AdminClient(self.client)
        self.partitions = wait_for_broker(lambda: self._ensure_topic(admin, partitions), bootstrap, should_stop,
                                          on_wait)
        self.producer = Producer({**self.client, "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                                  "message.timeout.ms": 0})  # infinite: while the broker is down we wait
        consumer = Consumer({**self.client, "group.id": "headwater-relay", "enable.auto.commit": False})
        try:
            self.published = wait_for_broker(lambda: self._published_positions(consumer), bootstrap, should_stop,
                                             on_wait)
        finally:
            consumer.close()
        self.position = min(self.published)  # every partition is complete up to here

    def _ensure_topic(self, admin: AdminClient, partitions: int) -> int:
        admin.poll(0)  # serves the client's log lines
        admin.list_topics(timeout=PROBE_TIMEOUT)  # fails fast while the broker is down
        future = admin.create_topics([NewTopic(self.topic, partitions)], operation_timeout=TIMEOUT)[self.topic]
        try:
            future.result(TIMEOUT)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        found = admin.list_topics(self.topic, timeout=TIMEOUT).topics[self.topic].partitions
        if not found:  # a Kafka cluster's node may list a topic just created before its partitions
            raise TimeoutError(f"{self.topic} lists no partitions yet")  # wait_for_broker tries again
        return len(found)

    def _published_positions(self, consumer: Consumer) -> list[int]:
        """The global position of the last event in each partition (0 if empty)."""
        last = [0] * self.partitions
        ends = {p: consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=TIMEOUT)[1]
                for p in range(self.partitions)}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(self.topic, p, ends[p] - 1) for p in pending])
        deadline = time.monotonic() + TIMEOUT
        while pending:
            if time.monotonic() > deadline:
                raise RelayError(f"could not read the last events of {self.topic} partitions {sorted(pending)}")
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            last[message.partition()] = self.rows.decode(message.value())[0]
            pending.discard(message.partition())
        return last

    def publish_once(self) -> int:
        """Publish the next batch of stored events and wait until the broker has them all; how many."""
        rows = self.store.read_all_rows(self.position, self.batch_size)
        failures: list[str] = []

        def delivered(error, _message):
            if error is not None:
                failures.append(str(error))

        sent = 0
        for row in rows:
            position, stream_id = row[0], row[1]
            partition = partition_for(stream_id, self.partitions)
            if position > self.published[partition]:
                self.producer.produce(self.topic, key=stream_id.encode(), value=self.rows.encode(row),
                                      partition=partition, on_delivery=delivered)
                sent += 1
                self.producer.poll(0)
        waited = 0
        while self.producer.flush(PROBE_TIMEOUT):  # while the broker is down, it waits (no timeout)
            if self.should_stop():  # what the broker did not take yet, the next run publishes
                return sent
            waited += 1
            if waited == WAIT_TOLD_AFTER:
                self.on_wait(f"{len(self.producer)} events wait for the broker at {self.bootstrap} (retrying; "
                             "Ctrl-C stops)")
        if failures:
            raise RelayError(f"events not acknowledged by the broker: {failures[:3]}")
        for row in rows:
            partition = partition_for(row[1], self.partitions)
            self.published[partition] = max(self.published[partition], row[0])
        if rows:
            self.position = rows[-1][0]
        return sent

    def run(self, interval: float = 0.2) -> None:
        """Publish until `should_stop()`."""
        while not self.should_stop():
            if not self.publish_once():
                time.sleep(interval)
