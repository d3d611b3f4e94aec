"""The outbox relay against a real broker, SIGKILLed repeatedly while the shop keeps
writing: the topic holds every event exactly once, each stream in order and in one
partition, and projections fed by the topic equal projections fed by the store."""
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path

from headwater.demo.shopping_cart import AddedThenRemoved, CurrentCarts, Shop, current_carts, removals
from headwater.eventsourcing import open_store as open_store_at
from headwater.eventsourcing.projection import ProjectionRunner
from headwater.eventsourcing.subscription import TopicSource, decode_value
from headwater.testing import wait_until

from .topic import read_topic, topic_end

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "carts"


def start_relay(location, bootstrap):
    return subprocess.Popen([sys.executable, "-m", "headwater", "events", "relay", "--store", location, "--topic",
                             TOPIC, "--bootstrap-server", bootstrap], cwd=ROOT, env=dict(os.environ),
                            stderr=subprocess.DEVNULL)


def test_relay_killed_repeatedly_loses_and_reorders_nothing(broker, store, open_store, store_location, tmp_path):
    rng = random.Random(5)
    Shop(store, seed=1).day(carts=30, actions=800)
    writing = threading.Event()
    writing.set()

    def business():
        shop = Shop(open_store(), seed=2, prefix="late")
        while writing.is_set():
            shop.day(carts=2, actions=20)

    writer = threading.Thread(target=business)
    writer.start()
    try:
        for _ in range(5):
            relay = start_relay(store_location, broker.bootstrap)
            published = topic_end(broker.bootstrap, TOPIC) if _ else 0
            wait_until(lambda: topic_end(broker.bootstrap, TOPIC) > published, timeout=60, what="the relay to publish")
            threading.Event().wait(rng.uniform(0, 0.3))
            relay.send_signal(signal.SIGKILL)
            relay.wait()
    finally:
        writing.clear()
        writer.join()
    relay = start_relay(store_location, broker.bootstrap)
    total = store.head_position()
    wait_until(lambda: topic_end(broker.bootstrap, TOPIC) >= total, timeout=60, what="every event in the topic")
    relay.terminate()
    assert relay.wait(30) == 143  # SIGTERM: stopped cleanly

    records = read_topic(broker.bootstrap, TOPIC)
    stored = store.read_all(0, 10 ** 6)
    assert len(records) == len(stored) == total
    rows = [decode_value(value) for _, _, value in records]
    assert sorted(row[3] for row in rows) == sorted(e.event_id for e in stored)  # each event exactly once
    by_stream = {}
    for (partition, key, _), row in zip(records, rows):
        assert key == row[1]
        by_stream.setdefault(key, []).append((partition, row[2]))
    for stream, entries in by_stream.items():
        assert len({p for p, _ in entries}) == 1  # one partition per stream
        assert [v for _, v in entries] == list(range(1, store.stream_version(stream) + 1))  # in order

    topic_views = open_store_at(str(tmp_path / "topic_views.db"))
    for projection in (CurrentCarts(), AddedThenRemoved()):
        ProjectionRunner(store, projection).catch_up()
        source = TopicSource(topic_views, broker.bootstrap, TOPIC)
        ProjectionRunner(topic_views, projection, source).catch_up()
        source.close()
    assert current_carts(topic_views) == current_carts(store)
    assert removals(topic_views) == removals(store)
    topic_views.close()
