"""Kill soak: SIGKILL the broker again and again under idempotent acks=all producers, then audit the log.

    .venv/bin/python bench/kill_soak.py [--kills 50] [--partitions 3] [--smoke]

A confluent-kafka producer (acks=all, enable.idempotence) writes numbered records to a few
partitions (record n of partition p is ``p:n``) while the broker (``--flush always``) is
SIGKILLed and restarted KILLS times. Ground truth is the set of delivery reports that
succeeded. Afterwards every partition is read from offset 0 and counted: acknowledged
records missing or changed at their acknowledged offset, records present twice, and order
violations (a partition's numbers not increasing). Any of those makes the exit status 1.
``make test`` runs a short soak (3 kills) through tests/system/test_storage_benches.py.
"""
from __future__ import annotations

import argparse
import itertools
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from rich.console import Console
from rich.table import Table

from headwater.testing import BrokerProcess, produce_all

TOPIC = "soak"


@dataclass
class SoakResult:
    kills: int
    produced: int
    acknowledged: int
    failed: int          # delivery reports with an error (never acknowledged: not counted as lost)
    in_log: int
    missing: int         # acknowledged, but not in the log at its offset
    duplicates: int      # records present more than once
    order_violations: int
    seconds: float

    @property
    def ok(self) -> bool:
        return not (self.missing or self.duplicates or self.order_violations)


class Producing(threading.Thread):
    """Produce ``p:n`` records round-robin over the partitions until stopped, then flush."""

    def __init__(self, bootstrap: str, partitions: int):
        super().__init__(daemon=True)
        self.partitions = partitions
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                                  "linger.ms": 2, "message.timeout.ms": 120_000, "retry.backoff.max.ms": 200})
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed = 0
        self.produced = 0
        self.stop = threading.Event()

    def _report(self, err, msg) -> None:
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed += 1

    def _values(self) -> Iterator[bytes]:
        """``p:n`` for partition p in turn (as run's partitions cycle), until stopped."""
        sequence = [0] * self.partitions
        while not self.stop.is_set():
            p = self.produced % self.partitions
            yield b"%d:%d" % (p, sequence[p])
            sequence[p] += 1
            self.produced += 1
            if self.produced % 100 == 0:
                time.sleep(0.005)   # a steady stream, not a flood: the broker also restarts on these cores

    def run(self) -> None:
        produce_all(self.producer, TOPIC, self._values(), partitions=itertools.cycle(range(self.partitions)),
                    on_delivery=self._report, poll_every=1)
        self.producer.flush(180)


def read_log(bootstrap: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every (offset, value) of each partition, from offset 0 to its end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kill-soak-audit", "enable.auto.commit": False})
    ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30)[1] for p in range(partitions)}
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(partitions)])
    log: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 120
    while sum(len(v) for v in log.values()) < sum(ends.values()) and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 1.0):
            if msg.error():
                raise RuntimeError(msg.error())
            log[msg.partition()].append((msg.offset(), msg.value()))
    consumer.close()
    return log


def audit(acked: list[tuple[int, int, bytes]], log: dict[int, list[tuple[int, bytes]]]) -> tuple[int, int, int]:
    """(missing, duplicates, order violations) of the log against the acknowledged records."""
    at = {(p, offset): value for p, records in log.items() for offset, value in records}
    missing = sum(1 for p, offset, value in acked if at.get((p, offset)) != value)
    counts = Counter(value for records in log.values() for _, value in records)
    duplicates = sum(n - 1 for n in counts.values() if n > 1)
    violations = 0
    for records in log.values():
        numbers = [int(value.split(b":")[1]) for _, value in records]
        violations += sum(1 for a, b in zip(numbers, numbers[1:]) if b <= a)
    return missing, duplicates, violations


def soak(data_dir: Path, kills: int, partitions: int = 3, acks_between_kills: int = 300, seed: int = 1) -> SoakResult:
    """Kill when at least ``acks_between_kills`` more records were acknowledged, at a random moment after."""
    started, rng = time.monotonic(), random.Random(seed)
    broker = BrokerProcess(data_dir, "--flush", "always").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([NewTopic(TOPIC, partitions, 1)])[TOPIC].result(30)
        producing = Producing(broker.bootstrap, partitions)
        producing.start()
        for _ in range(kills):
            target = len(producing.acked) + acks_between_kills
            deadline = time.monotonic() + 60
            while len(producing.acked) < target and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(rng.uniform(0, 1))
            broker.kill()     # requests in flight, appends half done: whatever the moment holds
            broker.restart()
        time.sleep(0.5)
        producing.stop.set()
        producing.join(240)
        log = read_log(broker.bootstrap, partitions)
    finally:
        if broker.proc.poll() is None:
            broker.stop()
    missing, duplicates, violations = audit(producing.acked, log)
    return SoakResult(kills, producing.produced, len(producing.acked), producing.failed,
                      sum(len(records) for records in log.values()), missing, duplicates, violations,
                      time.monotonic() - started)


def table(result: SoakResult) -> Table:
    t = Table(title="kill soak: SIGKILLs under idempotent acks=all production")
    row = {"kills": result.kills, "produced": result.produced, "acknowledged": result.acknowledged,
           "failed reports": result.failed, "records in log": result.in_log, "acked missing": result.missing,
           "duplicates": result.duplicates, "order violations": result.order_violations,
           "seconds": f"{result.seconds:.0f}"}
    for column in row:
        t.add_column(column, justify="right")
    t.add_row(*(f"{v:,}" if isinstance(v, int) else v for v in row.values()))
    return t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=50, help="SIGKILLs (default %(default)s)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions produced to (default %(default)s)")
    parser.add_argument("--smoke", action="store_true", help="3 kills")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hw-kill-soak-") as tmp:
        result = soak(Path(tmp) / "data", 3 if args.smoke else args.kills, args.partitions)
    Console(width=160).print(table(result))
    return 0 if result.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
