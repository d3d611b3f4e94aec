"""A Kafka Streams application with exactly_once_v2 (jvm/.../StreamsApp: a word count through a
repartition topic into a RocksDB store with its changelog, a windowed count, a KTable–KTable
join) against a Headwater broker, killed with SIGKILL twice in the middle of its work and
restarted, once on its own state directory and once on an empty one (its stores restored
from their changelogs); and the broker killed under it. What it finally wrote, read with
read_committed, equals plain Python's answer from the input; and read_committed shows exactly
the records of committed transactions, as the partitions' own bytes on disk tell them apart."""
from __future__ import annotations

import random
import re
import select
import signal
import struct
import subprocess
import threading
import time
from collections import Counter, defaultdict
from itertools import zip_longest
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.log import layout
from headwater.records import decode_records, iter_batches
from headwater.records.control import marker_is_commit
from headwater.testing import BrokerProcess, java_process, run_java, wait_until

from tests.support.clients import require_kafka_jars

PARTITIONS = 3
APPLICATION = "streams-eos"
INPUTS = {"lines": {}, "events": {}, "left": {"cleanup.policy": "compact"}, "right": {"cleanup.policy": "compact"}}
OUTPUTS = ("counts", "windowed", "joined")
WORDS = [f"w{i}" for i in range(40)]
WINDOW_MS, JITTER_MS = 10_000, 3_000   # the app's tumbling window; within its 5 s grace: nothing is late
CHUNK, CHUNK_S = 20, 0.1   # a feed that runs until the test stops it: ~200 records a second
REPARTITION = f"{APPLICATION}-words-repartition"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    require_kafka_jars()
    with BrokerProcess(tmp_path_factory.mktemp("kafka-streams") / "data", "--num-partitions", str(PARTITIONS)) as proc:
        yield proc


def make_input(seed: int = 11) -> dict[str, list[tuple[str | None, str | None, int]]]:
    """(key, value, timestamp) per input topic, in the order they are produced."""
    rng, now = random.Random(seed), int(time.time() * 1000) - 3_600_000
    lines = [(None, " ".join(rng.choices(WORDS, k=rng.randint(3, 12))).title() + ".", now + i) for i in range(3000)]
    events = [(f"user{rng.randrange(8)}", "click", now + i * 150 + rng.randrange(JITTER_MS)) for i in range(1500)]
    tables = {side: [(f"k{rng.randrange(30)}", None if rng.random() < 0.1 else f"{side}{i}", now + i)
                     for i in range(600)] for side in ("left", "right")}
    return {"lines": lines, "events": events, **tables}


def expected(inputs) -> dict[str, dict[str, object]]:
    """Plain Python: each output topic's final value per key."""
    counts = Counter(w for _, line, _ in inputs["lines"] for w in re.split(r"\W+", line.lower()) if w)
    windowed = Counter(f"{key}@{ts - ts % WINDOW_MS}" for key, _, ts in inputs["events"])
    left = {k: v for k, v, _ in inputs["left"]}
    right = {k: v for k, v, _ in inputs["right"]}
    joined = {k: f"{left[k]}+{right[k]}" for k in left if left[k] is not None and right.get(k) is not None}
    return {"counts": dict(counts), "windowed": dict(windowed), "joined": joined}


class Feed:
    """The input topics' records, produced in turns (each topic in its own order: the answer
    depends on no other), keyed records partitioned as Java's producer would (murmur2: the
    partitions Kafka Streams expects a key in). A phase that ends in a kill is fed until the
    test stops it, so the application is still busy when the kill comes however slowly it
    starts or restores on a loaded machine; what is left goes to the next phase."""

    def __init__(self, bootstrap: str, inputs) -> None:
        self.bootstrap = bootstrap
        rows = [[(topic, *record) for record in records] for topic, records in inputs.items()]
        self.records = [r for turn in zip_longest(*rows) for r in turn if r is not None]
        self.position = 0

    def produce(self, count: int | None = None, stop: threading.Event | None = None) -> None:
        """The next `count` records (all that are left if None) at once; with `stop`, CHUNK
        records every CHUNK_S until it is set or nothing is left."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "partitioner": "murmur2_random", "linger.ms": 5,
                             "enable.idempotence": True})
        end = len(self.records) if count is None else min(self.position + count, len(self.records))
        while self.position < end and not (stop is not None and stop.is_set()):
            step = end - self.position if stop is None else min(CHUNK, end - self.position)
            for topic, key, value, ts in self.records[self.position:self.position + step]:
                producer.produce(topic, key=key, value=value, timestamp=ts)
            self.position += step
            if stop is not None:
                producer.flush(60)
                time.sleep(CHUNK_S)
        assert producer.flush(60) == 0


def read(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, bytes, bytes | None]]:
    """(partition, offset, key, value) of everything a reader at `isolation` sees now."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-reader", "isolation.level": isolation,
                         "enable.partition.eof": True, "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen, at_end, deadline = [], set(), time.monotonic() + 30
    try:
        while len(at_end) < PARTITIONS:
            assert time.monotonic() < deadline, f"{topic}: no end of partitions {set(range(PARTITIONS)) - at_end}"
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
            else:
                seen.append((message.partition(), message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return seen


def log_starts(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "streams-reader"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[0] for p in range(PARTITIONS)}
    finally:
        consumer.close()


def decoded(topic: str, value: bytes | None):
    if value is None:
        return None
    return value.decode() if topic == "joined" else struct.unpack(">q", value)[0]


def tables(bootstrap: str) -> dict[str, dict[str, object]]:
    """Each output topic as a table: the last value per key, read_committed (a tombstone deletes)."""
    out = {}
    for topic in OUTPUTS:
        table = {}
        for _, _, key, value in sorted(read(bootstrap, topic, "read_committed")):
            table[key.decode()] = decoded(topic, value)
        out[topic] = {k: v for k, v in table.items() if v is not None}
    return out


def transactions_on_disk(data_dir: Path, topic: str) -> tuple[set, set, set]:
    """(committed, aborted, open) (partition, offset) of the transactional records in the
    topic's segment files: a record belongs to the first marker of its producer after it."""
    committed, aborted, open_ = set(), set(), set()
    for partition in range(PARTITIONS):
        directory = layout.partition_dir(data_dir, topic, partition)
        pending: dict[int, list] = defaultdict(list)
        for base in layout.segment_base_offsets(directory):
            try:
                buf = layout.segment_file(directory, base, layout.LOG).read_bytes()
            except FileNotFoundError:   # deleted since listed: Streams purges its repartition topics as it runs
                continue
            for pos, header in iter_batches(buf):
                _, records = decode_records(buf, pos)
                if header.is_control:
                    (committed if marker_is_commit(records[0]) else aborted).update(pending.pop(header.producer_id, ()))
                elif header.is_transactional:
                    pending[header.producer_id].extend((partition, r.offset) for r in records)
        open_.update(tp for records in pending.values() for tp in records)
    return committed, aborted, open_


class StreamsApp:
    """jvm/.../StreamsApp in a JVM of its own, on one state directory."""

    def __init__(self, broker, state_dir: Path, log_file: Path):
        self.proc = java_process("headwater.jvm.StreamsApp", broker.bootstrap, APPLICATION, str(state_dir),
                                 "lines", "counts", "events", "windowed", "left", "right", "joined", log_file=log_file)
        self.log_file = log_file

    def wait_running(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
            line = self.proc.stdout.readline() if ready else ""
            if line.strip() == "RUNNING":
                return
            if not line:
                self.kill()
                raise AssertionError(f"the Streams app is not RUNNING (see {self.log_file}):\n"
                                     f"{self.log_file.read_text()[-3000:]}")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM: the app's shutdown hook closes Kafka Streams (its last commit)."""
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()


def create_topics(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1, config=c) for t, c in
                                       [*INPUTS.items(), *((o, {}) for o in OUTPUTS)]]).values():
        future.result(30)


def open_transaction(data_dir: Path) -> bool:
    """A transaction open on the repartition topic (on disk): the application is mid-commit-interval."""
    return bool(transactions_on_disk(data_dir, REPARTITION)[2])


def finish(app: StreamsApp, bootstrap: str, want) -> None:
    """Run the application until its outputs equal Python's answer (or 90 s pass), then stop it."""
    try:
        app.wait_running()
        deadline = time.monotonic() + 90
        while (got := tables(bootstrap)) != want and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        app.stop()
    for topic in OUTPUTS:
        assert got[topic] == want[topic], f"{topic}: {set(got[topic].items()) ^ set(want[topic].items())}"


def check_exactly_once(broker) -> set[tuple[str, int, int]]:
    """Each key's committed counts only ever grow (a count processed twice, or an aborted
    transaction's count seen, would repeat one); and in every output and internal topic
    read_committed shows exactly the records whose transaction committed, read_uncommitted those
    and the aborted ones, once every transaction is over. Returns the aborted (topic, partition,
    offset) found on disk, those below a log start offset too."""
    for topic in ("counts", "windowed"):
        history = defaultdict(list)
        for _, _, key, value in sorted(read(broker.bootstrap, topic, "read_committed")):
            history[key].append(decoded(topic, value))
        assert all(values == sorted(set(values)) for values in history.values()), topic
    aborted = set()
    topics = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
    for topic in [*OUTPUTS, *(t for t in topics if t.startswith(APPLICATION))]:
        on_disk = wait_until(lambda: (found := transactions_on_disk(broker.data_dir, topic))[2] == set() and found,
                             timeout=60, what=f"{topic}: no open transaction")
        # records below the log start offset (DeleteRecords on the repartition topic) may still be on disk
        starts = log_starts(broker.bootstrap, topic)
        committed, aborted_here = ({(p, o) for p, o in records if o >= starts[p]} for records in on_disk[:2])
        visible = {(p, o) for p, o, _, _ in read(broker.bootstrap, topic, "read_committed")}
        everything = {(p, o) for p, o, _, _ in read(broker.bootstrap, topic, "read_uncommitted")}
        assert visible == committed and everything == committed | aborted_here, topic
        # an aborted record on the repartition topic may lie below its log start by now: still an abort
        aborted |= {(topic, p, o) for p, o in on_disk[1]}
    # Streams deleted the repartition topic's records it had consumed (DeleteRecords)
    assert all(start > 0 for start in log_starts(broker.bootstrap, REPARTITION).values())
    return aborted


def test_exactly_once_word_count_windows_and_join_survive_kills(broker, tmp_path):
    create_topics(broker.bootstrap)
    inputs, log_file = make_input(), tmp_path / "streams.log"
    feed = Feed(broker.bootstrap, inputs)

    def run_and_kill(state_dir: Path, after: int) -> int:
        """Run the app while input arrives; kill it once more than `after` counts are committed
        (on disk) and a transaction is open. Returns the count of committed counts."""
        def mid_transaction() -> int:
            """The app frozen (SIGSTOP) while a transaction is open on disk, else left running: a
            transaction seen open and then committed before a kill lands would abort nothing."""
            counts = len(transactions_on_disk(broker.data_dir, "counts")[0])
            if counts <= after or not open_transaction(broker.data_dir):
                return 0
            app.proc.send_signal(signal.SIGSTOP)
            time.sleep(0.5)   # requests already sent (an EndTxn) are answered meanwhile
            if open_transaction(broker.data_dir):
                return counts
            app.proc.send_signal(signal.SIGCONT)
            return 0

        app = StreamsApp(broker, state_dir, log_file)
        app.wait_running()
        stopped = threading.Event()
        feeder = threading.Thread(target=feed.produce, kwargs={"stop": stopped})
        feeder.start()
        try:
            return wait_until(mid_transaction, timeout=60, interval=0.05, what="a busy application")
        finally:
            app.kill()
            stopped.set()
            feeder.join()

    # 1. input until some output is committed, killed in the middle of a transaction;
    # 2. more, restarted on the same state directory (its producers' transactional ids fence the
    # killed ones) and killed the same way again
    run_and_kill(tmp_path / "state", run_and_kill(tmp_path / "state", 0))
    assert feed.position < len(feed.records), "the kills came before the input ran out"
    # 3. the rest; restarted on an empty state directory: the stores come back from their changelogs
    feed.produce()
    finish(StreamsApp(broker, tmp_path / "fresh-state", log_file), broker.bootstrap, expected(inputs))
    assert check_exactly_once(broker), "both kills came in the middle of a transaction: its records were aborted"

    # Reprocessing from scratch: Kafka's application reset tool rewinds the group to the start of
    # its inputs and deletes the internal topics
    reset = run_java("kafka-streams-application-reset", "--bootstrap-server", broker.bootstrap,
                     "--application-id", APPLICATION, "--input-topics", ",".join(INPUTS), "--force")
    assert reset.exit_code == 0, reset.stdout + reset.stderr
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": APPLICATION})
    try:
        rewound = consumer.committed([TopicPartition(t, p) for t in INPUTS for p in range(PARTITIONS)], timeout=30)
        topics = consumer.list_topics(timeout=30).topics
    finally:
        consumer.close()
    assert {(tp.topic, tp.partition, tp.offset) for tp in rewound} == {(t, p, 0) for t in INPUTS for p in range(PARTITIONS)}
    assert not [t for t in topics if t.startswith(APPLICATION)]


def test_exactly_once_survives_a_broker_crash(tmp_path):
    """The broker, not the application, killed with SIGKILL in the middle of a transaction and
    restarted: it aborts the open transactions as it starts, Streams rejoins, and the output is
    still Python's. (The input's producer is idempotent: its retries across the crash add nothing.)"""
    broker = BrokerProcess(tmp_path / "data", "--num-partitions", str(PARTITIONS)).start()
    try:
        create_topics(broker.bootstrap)
        inputs = make_input(seed=12)
        feed = Feed(broker.bootstrap, inputs)
        feed.produce(len(feed.records) // 3)
        app = StreamsApp(broker, tmp_path / "state", tmp_path / "streams.log")
        app.wait_running()
        stopped = threading.Event()
        feeder = threading.Thread(target=feed.produce, kwargs={"stop": stopped})
        feeder.start()
        wait_until(lambda: open_transaction(broker.data_dir), timeout=60, interval=0.02, what="a busy application")
        broker.kill()
        broker.restart()
        stopped.set()
        feeder.join()
        feed.produce()
        finish(app, broker.bootstrap, expected(inputs))
        check_exactly_once(broker)
    finally:
        broker.stop()
