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

from headwater.demo.shopping_cart import Shop
from headwater.testing import wait_until

from .topic import assert_topic_holds_the_store, assert_projections_from_topic_equal_store, topic_end

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "carts"


def start_relay(location, bootstrap, stderr=subprocess.DEVNULL):
    return subprocess.Popen([sys.executable, "-m", "headwater", "events", "relay", "--store", location, "--topic",
                             TOPIC, "--bootstrap-server", bootstrap], cwd=ROOT, env=dict(os.environ),
                            stderr=stderr)


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

    assert_topic_holds_the_store(broker.bootstrap, TOPIC, store)
    assert_projections_from_topic_equal_store(broker.bootstrap, TOPIC, store, tmp_path / "topic_views.db")
