"""What watches the broker while it is fuzzed: data written before that must not change, real
clients that must keep working, and the broker's own log, which must hold no internal error."""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.records import decode_records, iter_batches

CANARY_TOPIC = "canary-ledger"  # far, in bytes and length, from any name the corpus uses
ROUND_TRIP_TOPIC = "round-trip"


class Canary:
    """Records produced by confluent-kafka before the campaign (acks=all, zstd), read back as
    raw bytes: after the campaign every stored byte must be the same."""

    def __init__(self, bootstrap: str, partitions: int, records: int = 600):
        self.bootstrap, self.partitions = bootstrap, partitions
        self.sent = [(b"key-%d" % (i % 13), b"canary-%06d-" % i + bytes(range(i % 64))) for i in range(records)]
        self.stored: list[bytes] = []

    def write(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "compression.type": "zstd",
                             "linger.ms": 5})
        for i, (key, value) in enumerate(self.sent):
            producer.produce(CANARY_TOPIC, key=key, value=value, partition=i % self.partitions)
        if producer.flush(60):
            raise RuntimeError("canary records were not delivered")

    def ground_truth(self) -> list[list[tuple[bytes, bytes]]]:
        """What each partition must hold, in order: plain Python over what was sent."""
        return [[kv for i, kv in enumerate(self.sent) if i % self.partitions == p] for p in range(self.partitions)]

    @staticmethod
    def records_of(raw: bytes) -> list[tuple[bytes, bytes]]:
        out = []
        for pos, _ in iter_batches(raw):
            out += [(r.key, r.value) for r in decode_records(raw, pos)[1]]
        return out


class RoundTrip:
    """A confluent-kafka producer and consumer exchanging numbered records during the campaign:
    every delivered record must be consumed, in order."""

    def __init__(self, bootstrap: str):
        self.bootstrap = bootstrap
        self.delivered: list[int] = []
        self.consumed: list[int] = []
        self.errors: list[str] = []
        self._stop_producing = threading.Event()
        self._produced = threading.Event()  # set once the last delivery report is in
        self._give_up = float("inf")  # once stopped: when the consumer stops waiting for the last records
        self._producer = threading.Thread(target=self._produce, daemon=True)
        self._consumer = threading.Thread(target=self._consume, daemon=True)

    def start(self) -> None:
        self._producer.start()
        self._consumer.start()

    def _produce(self) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 0})

        def report(err, msg):
            if err:
                self.errors.append(str(err))
            else:
                self.delivered.append(int(msg.value()))
        n = 0
        while not self._stop_producing.is_set():
            producer.produce(ROUND_TRIP_TOPIC, value=str(n).encode(), partition=0, on_delivery=report)
            producer.poll(0.02)
            n += 1
        if producer.flush(60):
            self.errors.append("round-trip records left undelivered")
        self._produced.set()

    def _consume(self) -> None:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "unused", "enable.auto.commit": False})
        consumer.assign([TopicPartition(ROUND_TRIP_TOPIC, 0, 0)])
        while not self._produced.is_set() or len(self.consumed) < len(self.delivered):
            for msg in consumer.consume(500, 0.2):
                if msg.error():
                    self.errors.append(str(msg.error()))
                else:
                    self.consumed.append(int(msg.value()))
            if time.monotonic() > self._give_up:
                break
        consumer.close()

    def stop(self, timeout: float = 60) -> None:
        self._give_up = time.monotonic() + timeout
        self._stop_producing.set()
        self._producer.join(timeout + 10)
        self._consumer.join(timeout + 10)

    @property
    def lost(self) -> int:
        return len(set(self.delivered) - set(self.consumed))

    @property
    def in_order(self) -> bool:
        return self.consumed == sorted(self.consumed) and len(set(self.consumed)) == len(self.consumed)


_PEER = re.compile(r"from \('127\.0\.0\.1', (\d+)\) after an internal error")


@dataclass
class LogScan:
    """The broker log since the last scan: tracebacks, internal errors, and the client ports
    that caused them (so a finding can be traced back to the frame sent on that connection)."""
    path: Path
    position: int = 0
    tracebacks: int = 0
    internal_errors: int = 0
    excerpts: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.position = self.path.stat().st_size if self.path.exists() else 0

    def scan(self) -> list[int]:
        with open(self.path, "rb") as f:
            f.seek(self.position)
            text = f.read().decode("utf-8", "replace")
            self.position = f.tell()
        self.tracebacks += text.count("Traceback (most recent call last)")
        self.internal_errors += text.count("internal error")
        for block in text.split("Traceback (most recent call last)")[1:]:
            self.excerpts.append(block.strip().splitlines()[-1][:300])
        return [int(port) for port in _PEER.findall(text)]
