"""The wider Kafka ecosystem, unchanged, against Headwater: aiokafka, faust-streaming and
quixstreams, each compared with the same computation in plain Python. (kafka-python's admin client is
exercised in test_admin_apis.py.)"""
import asyncio
import collections
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition as KafkaPartition

from headwater.testing import BrokerProcess

from tests.support.clients import committed_offset


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("ecosystem") / "data", "--num-partitions", "2").start()
    yield proc.bootstrap
    proc.stop()


async def _create(bootstrap, name, partitions):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


def test_aiokafka_idempotent_producer_group_of_two_and_seek(bootstrap):
    sent = [(b"k%d" % (i % 7), b"v%d" % i) for i in range(200)]

    async def scenario():
        await _create(bootstrap, "aio", 4)
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=10)
        await producer.start()
        try:
            delivered = await asyncio.gather(*[await producer.send("aio", value=v, key=k) for k, v in sent])
        finally:
            await producer.stop()
        members = [AIOKafkaConsumer("aio", bootstrap_servers=bootstrap, group_id="aio-group",
                                    auto_offset_reset="earliest", enable_auto_commit=False) for _ in range(2)]
        for member in members:
            await member.start()
        seen = {0: [], 1: []}
        try:
            while sum(map(len, seen.values())) < len(sent):
                for i, member in enumerate(members):
                    for records in (await member.getmany(timeout_ms=500)).values():
                        seen[i] += [(r.key, r.value, r.partition, r.offset) for r in records]
            assignments = [member.assignment() for member in members]
            # the seek: member 0 rewinds one of its partitions to offset 1 and reads it again
            tp = sorted(assignments[0])[0]
            members[0].seek(tp, 1)
            again = (await members[0].getmany(tp, timeout_ms=5000)).get(tp, [])
        finally:
            for member in members:
                await member.stop()
        return delivered, seen, assignments, tp, again

    delivered, seen, assignments, tp, again = asyncio.run(scenario())
    assert assignments[0] and assignments[1] and not assignments[0] & assignments[1]
    assert assignments[0] | assignments[1] == {TopicPartition("aio", p) for p in range(4)}
    everything = seen[0] + seen[1]
    assert sorted((k, v) for k, v, _, _ in everything) == sorted(sent)
    expected = collections.defaultdict(list)  # plain Python: per partition, in send order, offsets from 0
    for (key, value), meta in zip(sent, delivered):
        expected[meta.partition].append((key, value, meta.offset))
    for partition, records in expected.items():
        assert [(k, v, o) for k, v, p, o in sorted(everything, key=lambda r: r[3]) if p == partition] == records
        assert [o for _, _, o in records] == list(range(len(records)))
    assert [(r.key, r.value, r.offset) for r in again] == expected[tp.partition][1:]


FAUST_APP = textwrap.dedent('''
    import json, os, sys
    import faust

    bootstrap, state_dir, events, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    app = faust.App("headwater-faust", broker="kafka://" + bootstrap, store="memory://", datadir=state_dir,
                    topic_partitions=2, web_enabled=False, producer_acks=-1,
                    # the first worker exits without leaving: the second joins once its session ends
                    broker_session_timeout=6, broker_heartbeat_interval=1)
    clicks = app.topic("faust-clicks", key_type=str, value_type=str, partitions=2)
    counts = app.Table("click-counts", default=int, partitions=2)

    @app.agent(clicks)
    async def count(stream):
        async for key, _ in stream.items():
            counts[key] += 1

    @app.timer(0.5)
    async def report():
        # the first worker: every event counted; the second: the table is back from its changelog
        if sum(counts.values()) == events:
            await app.producer.flush()  # the changelog is written
            await app.commit(app.consumer.assignment())  # the events are consumed
            with open(out, "w") as f:
                json.dump(dict(counts.items()), f)
            os._exit(0)  # faust's own shutdown can outlive the test; everything that matters is flushed

    sys.argv = [sys.argv[0], "worker", "-l", "warn", "--without-web"]
    app.main()
''')


def test_faust_table_counted_per_key_and_rebuilt_from_its_changelog(bootstrap, tmp_path):
    keys = [f"user-{i % 5}" for i in range(60)]
    expected = collections.Counter(keys)  # plain Python
    producer = Producer({"bootstrap.servers": bootstrap})
    asyncio.run(_create(bootstrap, "faust-clicks", 2))
    for key in keys:
        producer.produce("faust-clicks", key=key.encode(), value=b'"click"')  # faust: raw keys, JSON values
    assert producer.flush(30) == 0
    script = tmp_path / "faust_app.py"
    script.write_text(FAUST_APP)

    def worker(name):
        out = tmp_path / f"{name}.json"
        result = subprocess.run([sys.executable, str(script), bootstrap, str(tmp_path / name), str(len(keys)), str(out)],
                                capture_output=True, text=True, timeout=180)
        assert out.exists(), result.stderr[-3000:]
        return json.loads(out.read_text())
    assert worker("first") == dict(expected)
    # a fresh worker, without local state and with every event consumed, rebuilds the table from its changelog
    assert worker("second") == dict(expected)


QUIX_APP = Path(__file__).parents[1] / "support" / "ecosystem" / "quix_window_count.py"
DURATION_MS, GRACE_MS = 10_000, 2_000


def quix_python() -> Path | None:
    """quixstreams' virtualenv (``make test`` builds it: quixstreams pins confluent-kafka < 2.13)."""
    path = Path(os.environ.get("HEADWATER_QUIX_PYTHON", Path(__file__).parents[2] / ".venv-quix" / "bin" / "python"))
    return path if path.exists() else None


def windowed_counts(events):
    """Plain Python: final tumbling-window counts per key, with grace, closed per key (quixstreams' default)."""
    latest, counts = {}, collections.Counter()
    for key, ts in events:
        latest[key] = max(latest.get(key, ts), ts)
        start = ts - ts % DURATION_MS
        if start + DURATION_MS > latest[key] - GRACE_MS:  # else too late: the window is closed
            counts[(key, start)] += 1
    return {(k, s): c for (k, s), c in counts.items() if s + DURATION_MS <= latest[k] - GRACE_MS}


def sensor_events(seed: int, n: int) -> list[tuple[str, int]]:
    """(key, event timestamp) of ``n`` readings of 3 sensors, some late: within grace, just past it, far past it."""
    rng = random.Random(seed)
    events, now = [], 1_700_000_000_000
    for i in range(n):
        now += rng.randrange(50, 400)
        late = rng.choice([0, 0, 0, 1_000, 2_500, 6_000])
        events.append((f"sensor-{i % 3}", now - late + 7))  # +7: no timestamp on a window edge
    return events


def require_quix_python() -> Path:
    python = quix_python()
    if python is None:
        # In CI a missing virtualenv fails the run; only by hand does it skip.
        (pytest.fail if os.environ.get("CI") else pytest.skip)("quixstreams' virtualenv is missing: make quix-venv")
    return python


def test_quixstreams_windowed_count_with_grace(bootstrap, tmp_path):
    python = require_quix_python()
    events = sensor_events(11, 300)
    expected = windowed_counts(events)
    assert any(c for c in expected.values()) and len(expected) > 10
    asyncio.run(_create(bootstrap, "quix-events", 1))
    producer = Producer({"bootstrap.servers": bootstrap})
    for key, ts in events:
        producer.produce("quix-events", key=key.encode(), value=b"{}", timestamp=ts)
    assert producer.flush(30) == 0
    result = subprocess.run([str(python), str(QUIX_APP), bootstrap, str(tmp_path / "state"), str(len(expected))],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "quix-check", "auto.offset.reset": "earliest"})
    consumer.subscribe(["quix-window-counts"])
    got = {}
    for _ in range(30):
        for msg in consumer.consume(100, timeout=1):
            assert msg.error() is None, msg.error()
            window = json.loads(msg.value())
            got[(msg.key().decode(), window["start"])] = window["value"]
        if len(got) >= len(expected):
            break
    consumer.close()
    assert got == expected


def read_committed_windows(bootstrap: str, topic: str) -> list[tuple[str, int, int]]:
    """Every (key, window start, count) of ``topic`` up to its last stable offset, as a read_committed reader sees it."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "quix-eos-check", "isolation.level": "read_committed",
                         "enable.partition.eof": True, "enable.auto.commit": False})
    consumer.assign([KafkaPartition(topic, 0, 0)])
    windows = []
    try:
        while (msg := consumer.poll(10)) is not None and msg.error() is None:
            window = json.loads(msg.value())
            windows.append((msg.key().decode(), window["start"], window["value"]))
        assert msg is not None and msg.error().code() == KafkaError._PARTITION_EOF, msg and msg.error()
    finally:
        consumer.close()
    return windows


def test_quixstreams_exactly_once_windowed_count_survives_sigkills(bootstrap, tmp_path):
    """processing_guarantee="exactly-once": the app is SIGKILLed twice mid-stream (its window state in
    RocksDB and a changelog topic, written in its transactions) and restarted on the same state directory;
    the output, read_committed, holds every window count of plain Python once: none twice, none lost."""
    python = require_quix_python()
    events = sensor_events(13, 450)
    expected = windowed_counts(events)
    asyncio.run(_create(bootstrap, "quix-eos-events", 1))
    kills = [threading.Event(), threading.Event()]

    def produce_stream():  # a third of the events per run, paced, so every kill lands while events arrive
        producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
        for i, (key, ts) in enumerate(events):
            if i % 150 == 0 and i:
                kills[i // 150 - 1].wait(60)
            producer.produce("quix-eos-events", key=key.encode(), value=b"{}", timestamp=ts)
            producer.poll(0)
            time.sleep(0.01)
        assert producer.flush(30) == 0
    stream = threading.Thread(target=produce_stream, daemon=True)
    stream.start()

    log = tmp_path / "app.log"

    def app() -> subprocess.Popen:
        with log.open("a") as stderr:
            return subprocess.Popen([str(python), str(QUIX_APP), bootstrap, str(tmp_path / "state"), "0",
                                     "exactly-once", "quix-eos"], stdout=subprocess.DEVNULL, stderr=stderr)
    killed_at = [0]
    for kill in kills:
        proc = app()
        while (offset := committed_offset(bootstrap, "quix-eos-counts", "quix-eos-events")) <= killed_at[-1]:
            assert proc.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)  # until this run has committed a transaction of its own
        proc.kill()
        proc.wait()
        killed_at.append(offset)
        kill.set()
    stream.join()
    assert 0 < killed_at[1] < killed_at[2] < len(events), killed_at  # both kills mid-stream
    assert app().wait(timeout=120) == 0, log.read_text()[-3000:]  # stops 5 s after the last event
    assert committed_offset(bootstrap, "quix-eos-counts", "quix-eos-events") == len(events)
    windows = read_committed_windows(bootstrap, "quix-eos-window-counts")
    assert len(windows) == len(set((key, start) for key, start, _ in windows)), "a window counted twice"
    assert {(key, start): count for key, start, count in windows} == expected
