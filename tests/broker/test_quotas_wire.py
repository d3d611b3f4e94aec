"""Client quotas: a producer above its byte rate is held to it and told so; other clients are not."""
from __future__ import annotations

import itertools
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from headwater.testing import produce_all

QUOTA = 100_000  # bytes/s for client id "heavy"
VALUE = b"x" * 1000
MEASURE = 10.0   # seconds, after a second of warm-up (the bucket starts with a second's burst)
FETCH_BYTES = 16384  # small fetches: a consumer's throttle comes between them, not after one answer holding all


def quotas(bootstrap, *args) -> str:
    return subprocess.run([sys.executable, "-m", "headwater", "quotas", *args, "--bootstrap-server", bootstrap],
                          check=True, capture_output=True, text=True).stdout


class Flood:
    """A confluent-kafka producer sending as fast as it may (or at a pace); counts bytes acknowledged and
    the throttles it was told of."""

    def __init__(self, bootstrap: str, client_id: str, pace: float | None = None):
        self.pace = pace  # records per second at most, or as fast as the producer takes them
        self.acked: list[tuple[float, int]] = []
        self.throttles: list = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 16384,  # small requests: throttles of ~0.16 s, not seconds
                                  "throttle_cb": self.throttles.append, "queue.buffering.max.kbytes": 64})
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _values(self) -> Iterator[bytes]:
        while not self.stop.is_set():
            yield VALUE
            if self.pace:
                time.sleep(1 / self.pace)

    def _run(self) -> None:
        produce_all(self.producer, "flood", self._values(), on_delivery=self._delivered, poll_every=1)
        self.producer.flush(30)

    def _delivered(self, err, msg) -> None:
        assert err is None, err
        self.acked.append((time.monotonic(), len(msg.value())))

    def rate(self, start: float, end: float) -> float:
        return sum(size for t, size in self.acked if start <= t < end) / (end - start)


def test_a_producer_above_its_quota_is_throttled_to_it_and_others_are_not(broker):
    quotas(broker.bootstrap, "alter", "--client-id", "heavy", "--add", f"producer_byte_rate={QUOTA}")
    assert "100000" in quotas(broker.bootstrap, "describe", "--json")
    heavy, light = Flood(broker.bootstrap, "heavy"), Flood(broker.bootstrap, "light", pace=1000)
    heavy.thread.start()
    light.thread.start()
    start = time.monotonic() + 1.0
    time.sleep(1.0 + MEASURE)
    end = time.monotonic()
    heavy.stop.set()
    light.stop.set()
    heavy.thread.join(60)
    light.thread.join(60)
    # Bytes on the wire are the values plus record and batch overhead (~1.5% here): within 10% of the quota.
    assert 0.9 * QUOTA <= heavy.rate(start, end) <= 1.1 * QUOTA
    assert any(t.throttle_time > 0 for t in heavy.throttles)  # librdkafka reports 0 too, when a throttle ends
    assert not light.throttles
    # Above the band the heavy one is held to (its pace, ~2x the quota, is not reached on a loaded machine)
    assert light.rate(start, end) > 1.1 * QUOTA, "a client without a quota is not held back to it"


def test_a_consumer_above_its_byte_rate_is_throttled_to_it(broker):
    rate, values = 100_000, [b"%06d" % i + VALUE for i in range(400)]   # 400 KB: ~3 s past the first second's burst
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5, "batch.size": FETCH_BYTES})
    produce_all(producer, "slow-read", values, partitions=itertools.repeat(0))
    assert producer.flush(30) == 0
    quotas(broker.bootstrap, "alter", "--client-id", "slow-reader", "--add", f"consumer_byte_rate={rate}")
    throttles: list = []
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "slow-reader", "group.id": "unused",
                         "enable.auto.commit": False, "throttle_cb": throttles.append,
                         "fetch.max.bytes": FETCH_BYTES, "max.partition.fetch.bytes": FETCH_BYTES,
                         "message.max.bytes": FETCH_BYTES})
    consumer.assign([TopicPartition("slow-read", 0, OFFSET_BEGINNING)])
    got, start = [], time.monotonic()
    while len(got) < len(values) and time.monotonic() - start < 120:
        got += [m.value() for m in consumer.consume(100, 1.0) if not m.error()]
    elapsed = time.monotonic() - start
    consumer.close()
    assert got == values
    assert any(t.throttle_time > 0 for t in throttles)
    # held to the quota: what arrived past the first second's burst and the last fetch took its time at the rate
    assert elapsed >= 0.9 * (sum(map(len, values)) - rate - FETCH_BYTES) / rate


def test_quotas_against_no_broker_is_one_line_soon():
    with socket.socket() as s:   # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        address = "127.0.0.1:%d" % s.getsockname()[1]
    result = subprocess.run([sys.executable, "-m", "headwater", "quotas", "describe", "--bootstrap-server", address],
                            capture_output=True, text=True, timeout=25)   # kafka-python alone would wait 30 s
    assert result.returncode == 1
    assert result.stderr.startswith(f"headwater: error: cannot reach a broker at {address}")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
