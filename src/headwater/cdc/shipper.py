"""Produce change events and learn which source position the broker holds durably.

Both connectors hand events to a `Shipper` grouped into *batches* (a PostgreSQL
transaction, a run of SQLite changelog rows, a snapshot). A batch gets its source position
when it is closed. The durable position is the position of the last batch such that it and
every batch before it were acknowledged by the broker (acks=all, idempotent producer):
only that position may be confirmed to the source (flush LSN, changelog trim).

Acknowledgement is learnt per batch, not per event: our producer reports failed deliveries
only (a Python callback per acknowledged event would cost more than building the event), so
when its queue is empty and no failure was reported, every event produced so far is
acknowledged, and with it every batch sent so far. Under steady load the queue seldom empties
on its own: the connector then flushes it now and then (`Shipper.settle`).
"""
from __future__ import annotations

from collections import deque
import json
import time
from typing import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.waiting import PROBE_TIMEOUT, Stopped, client_log, never, wait_for_broker

from .envelope import ChangeEvent


def producer_config(bootstrap: str, security: dict[str, str] | None = None) -> dict:
    """``security``: librdkafka properties for a secured broker (security.protocol, sasl.*, ssl.*)."""
    return {
        "bootstrap.servers": bootstrap,
        **(security or {}),
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        # One produce request in flight per broker (each carries up to batch.size per partition):
        # with more, librdkafka's idempotent producer busy-waits for the acknowledgements, and on
        # a machine shared with the broker that CPU is the broker's (client CPU per 10 KB event:
        # 140 µs at the default of 5, 16 µs at 1; per 300 B event: 3.3 µs and 2.0 µs).
        "max.in.flight.requests.per.connection": 1,
        "message.timeout.ms": 0,  # infinite: while the broker is down we wait, never drop
        "reconnect.backoff.max.ms": 1000,  # and notice within a second that it is back
        "partitioner": "murmur2_random",  # the Java client's choice: same key, same partition
        "delivery.report.only.error": True,  # see the module's docstring: an empty queue acknowledges
        "logger": client_log,  # a broker that is down is told of once per distinct line
    }


class ConnectorProducer(Producer):
    """The connectors' own producer. It reports failed deliveries only, all to one callback
    that keeps the first in `failure`: events then carry no callback of their own, which
    saves a quarter of the cost of handing an event to librdkafka."""

    def __init__(self, config: dict):
        self.failure: KafkaError | None = None
        super().__init__({**config, "on_delivery": self._failed})

    def _failed(self, err: KafkaError, _msg) -> None:
        if self.failure is None:
            self.failure = err


def new_producer(bootstrap: str, security: dict[str, str] | None = None) -> Producer:
    return ConnectorProducer(producer_config(bootstrap, security))


class Batch:
    __slots__ = ("pending", "position", "tracker")

    def __init__(self, tracker: AckTracker):
        self.pending = 0
        self.position: int | None = None  # set on close
        self.tracker = tracker

    def delivered(self, err: KafkaError | None, _msg) -> None:
        """Delivery callback of each of the batch's events (one bound method, no closure per event)."""
        if err is not None:
            self.tracker.error = err
        else:
            self.pending -= 1
            self.tracker.delivered += 1


class AckTracker:
    """Batches in send order; `advance()` returns the new durable position, if it moved."""

    def __init__(self) -> None:
        self._batches: deque[Batch] = deque()
        self.durable: int | None = None
        self.delivered = 0  # events acknowledged
        self.error: KafkaError | None = None  # the first delivery error, if any

    def open(self) -> Batch:
        batch = Batch(self)
        self._batches.append(batch)
        return batch

    def close(self, batch: Batch, position: int) -> None:
        batch.position = position

    def acknowledge_all(self) -> None:
        """The producer's queue is empty and reported no failure: every event sent is acknowledged."""
        for batch in self._batches:
            self.delivered += batch.pending
            batch.pending = 0

    def awaiting(self) -> bool:
        """Whether a closed batch waits for acknowledgement (so the durable position could move)."""
        return bool(self._batches) and self._batches[0].position is not None

    def mark(self, position: int) -> None:
        """A position with nothing to deliver (an empty transaction, a heartbeat)."""
        self.close(self.open(), position)

    def idle(self) -> bool:
        return not self._batches

    def advance(self) -> int | None:
        moved = False
        while self._batches and self._batches[0].pending == 0 and self._batches[0].position is not None:
            self.durable = self._batches.popleft().position
            moved = True
        return self.durable if moved else None


STOP_FLUSH = 30.0  # seconds a stopping connector waits, at most, for acknowledgements


class DeliveryFailed(Exception):
    pass


class Shipper:
    """A confluent-kafka Producer plus acknowledged-position tracking.

    `producer` has the confluent_kafka.Producer interface. `on_wait` is called while the
    local queue is full (broker down or slow), so the caller can keep its source alive; if
    `should_stop()` then, the send raises `Stopped` (what is unacknowledged keeps its place at
    the source).
    A producer of the caller's own that reports every delivery works too (the callbacks
    then count each event, at the old cost).
    """

    def __init__(self, producer: Producer, on_wait: Callable[[], None] = lambda: None,
                 should_stop: Callable[[], bool] = never):
        self.producer = producer
        self.should_stop = should_stop
        # Our own producer keeps the first failed delivery itself; another gets a callback per event.
        self._callbacks = not isinstance(producer, ConnectorProducer)
        self.tracker = AckTracker()
        self.on_wait = on_wait
        self._on_empty: list[_Acknowledgement] = []  # records produced outside the batches
        self._emptied = time.monotonic()  # when the producer's queue was last seen empty
        self._stop_deadline: float | None = None  # see flush_on_stop
        self._told_stop = False

    @property
    def delivered(self) -> int:
        return self.tracker.delivered

    def send(self, topic: str, key: bytes | None, value: bytes | None, batch: Batch) -> None:
        """Hand one event to the producer, which copies it: the connectors send each event as
        soon as it is encoded, so its JSON is freed at once."""
        batch.pending += 1
        try:
            if self._callbacks:
                self.producer.produce(topic, value, key, on_delivery=batch.delivered)
            else:
                self.producer.produce(topic, value, key)
        except BufferError:  # the local queue is full: the broker is slow or down
            self._produce(topic, key, value, batch.delivered, None)

    def send_all(self, events: list[ChangeEvent], batch: Batch) -> None:
        for event in events:
            self.send(event.topic, event.key, event.value, batch)

    def produce(self, topic: str, key: bytes, value: bytes, on_acked: Callable[[], None],
                partition: int | None = None) -> None:
        """Produce one record; `on_acked()` runs from `poll` once the broker acknowledged it."""
        acknowledgement = _Acknowledgement(self.tracker, on_acked)
        self._on_empty.append(acknowledgement)
        self._produce(topic, key, value, acknowledgement.delivered, partition)

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, callback: Callable,
                 partition: int | None) -> None:
        extra = {} if partition is None else {"partition": partition}
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, on_delivery=callback, **extra)
                return
            except BufferError:  # the local queue is full: the broker is slow or down
                if self.should_stop():
                    raise Stopped()
                self.poll(0.1)
                self.on_wait()

    def poll(self, timeout: float = 0) -> int | None:
        """Run delivery callbacks; the new durable position, if it moved."""
        self.producer.poll(timeout)
        return self._acknowledged()

    def flush(self, timeout: float | None = None) -> int | None:
        """Wait for the broker to acknowledge everything sent; the new durable position, if it moved."""
        self.producer.flush(-1 if timeout is None else timeout)
        return self._acknowledged()

    def flush_on_stop(self, say: Callable[[str], None]) -> int | None:
        """`flush` once asked to stop: all such calls together wait at most STOP_FLUSH s, in
        1 s steps so a second signal is heard, and if the broker keeps events waiting, `say`
        hears so once. What stays unacknowledged keeps its place at the source and is
        shipped again after a restart."""
        if self._stop_deadline is None:
            self._stop_deadline = time.monotonic() + STOP_FLUSH
        durable = None
        while True:
            remaining = self._stop_deadline - time.monotonic()
            moved = self.flush(max(0.0, min(1.0, remaining)))
            durable = durable if moved is None else moved
            if not len(self.producer) or remaining <= 1.0:
                return durable
            if not self._told_stop:
                self._told_stop = True
                say(f"stopping: {len(self.producer)} events wait for the broker's acknowledgement, up to "
                    f"{STOP_FLUSH:g} s (a second Ctrl-C stops now; a restart ships them again)")

    def settle(self, after: float = 0.5) -> int | None:
        """`poll(0)`, and `flush` (at most `after` s) if a closed batch or a stored position has
        waited `after` s for the queue to empty on its own: under steady load it would not."""
        durable = self.poll(0)
        waiting = self.tracker.awaiting() or self._on_empty
        if waiting and time.monotonic() - self._emptied >= after:
            moved = self.flush(after)
            durable = durable if moved is None else moved
        return durable

    def _acknowledged(self) -> int | None:
        if not self._callbacks and self.tracker.error is None:
            self.tracker.error = self.producer.failure
        if self.tracker.error is not None:
            raise DeliveryFailed(f"broker refused a change event: {self.tracker.error}")
        if len(self.producer) == 0:  # nothing in flight, no failure waiting to be reported
            self._emptied = time.monotonic()
            self.tracker.acknowledge_all()
            acknowledged, self._on_empty = self._on_empty, []
            for acknowledgement in acknowledged:
                acknowledgement.acked()
        return self.tracker.advance()


class _Acknowledgement:
    """One record outside the batches (a stored position): `on_acked` runs once, from its
    delivery report or when the producer's queue is empty, whichever the producer gives."""
    __slots__ = ("tracker", "on_acked")

    def __init__(self, tracker: AckTracker, on_acked: Callable[[], None]):
        self.tracker, self.on_acked = tracker, on_acked

    def delivered(self, err: KafkaError | None, _msg) -> None:
        if err is not None:
            self.tracker.error = err
        else:
            self.acked()

    def acked(self) -> None:
        on_acked, self.on_acked = self.on_acked, None
        if on_acked is not None:
            on_acked()


class PositionStore:
    """The connector's own position, kept as the last record with its key in a topic."""

    def __init__(self, bootstrap: str, topic: str, name: str, security: dict[str, str] | None = None):
        self.bootstrap, self.topic, self.key = bootstrap, topic, name.encode()
        self.client = {"bootstrap.servers": bootstrap, **(security or {}), "logger": client_log}

    def load(self, wait_log: Callable[[str], None] = print, should_stop: Callable[[], bool] = never) -> dict | None:
        """The stored position dict, or None. While the broker is down it waits (and says so
        once), on the same two clients, until `should_stop()`: then `Stopped`."""
        admin = AdminClient(self.client)
        consumer = Consumer({**self.client, "group.id": "headwater-cdc",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest"})

        def reachable() -> tuple[int, int]:
            admin.poll(0)  # serves the client's log lines
            admin.list_topics(timeout=PROBE_TIMEOUT)  # fails fast while the broker is down
            self._create_topic(admin)
            return consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=5)
        try:
            low, high = wait_for_broker(reachable, self.bootstrap, should_stop, wait_log)
            found = None
            if high > low:
                consumer.assign([TopicPartition(self.topic, 0, low)])
                offset = low
                while offset < high:
                    if should_stop():
                        raise Stopped()
                    msg = consumer.poll(1.0)
                    if msg is None or msg.error():
                        continue
                    offset = msg.offset() + 1
                    if msg.key() == self.key:
                        found = json.loads(msg.value()) if msg.value() is not None else None
            return found
        finally:
            consumer.close()

    def _create_topic(self, admin: AdminClient) -> None:
        # One partition (one order of positions), compacted: only the last position per key matters.
        future = admin.create_topics([NewTopic(self.topic, 1, config={"cleanup.policy": "compact"})],
                                     operation_timeout=5, request_timeout=5)[self.topic]
        try:
            future.result()
        except KafkaException as exc:
            if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            # A cluster that cannot create topics here (no controller in reach, no CreateTopics)
            # may still auto-create it: then the topic is usable, only not compacted.
            topic = admin.list_topics(self.topic, timeout=5).topics.get(self.topic)
            if topic is None or topic.error is not None or not topic.partitions:
                raise

    def save(self, shipper: Shipper, position: dict, on_stored: Callable[[], None]) -> None:
        """Write `position`; `on_stored()` runs once the broker acknowledged it."""
        shipper.produce(self.topic, self.key, json.dumps(position).encode(), on_stored, partition=0)
