"""The event store's outbox relay (`headwater events relay`) on Apache Kafka while the shop keeps
writing, the node leading the events topic's first partition killed mid-run: the topic holds every
stored event exactly once, each stream in order and in one partition, and projections fed from
the topic equal the same projections fed from the store."""
import threading

from confluent_kafka import KafkaException

from headwater.demo.shopping_cart import Shop
from headwater.eventsourcing import open_store
from headwater.testing import wait_until

from ..eventsourcing.test_relay import TOPIC, start_relay
from ..eventsourcing.topic import assert_topic_holds_the_store, assert_projections_from_topic_equal_store, topic_end
from .conftest import leader_of


def published(bootstrap: str) -> int:
    """How many events the topic holds; 0 while a dead leader still answers for a partition."""
    try:
        return topic_end(bootstrap, TOPIC)
    except KafkaException:
        return 0


def test_relay_and_projection_across_a_node_crash(kafka_cluster, tmp_path):
    bootstrap, location = kafka_cluster.bootstrap, str(tmp_path / "events.db")
    store = open_store(location)
    Shop(store, seed=1).day(carts=20, actions=300)
    writing = threading.Event()
    writing.set()

    def business():
        shop = Shop(open_store(location), seed=2, prefix="late")
        while writing.is_set():
            shop.day(carts=2, actions=20)
    writer = threading.Thread(target=business)
    relay = start_relay(location, bootstrap, stderr=open(tmp_path / "relay.log", "wb"))
    writer.start()
    try:
        try:
            wait_until(lambda: published(bootstrap) > 0, timeout=180, what="the relay to publish")
            with kafka_cluster.node_down(leader_of(bootstrap, TOPIC)):
                before = published(bootstrap)
                wait_until(lambda: published(bootstrap) > before + 200, timeout=60,
                           what="the relay to publish during the outage")
        finally:
            writing.clear()
            writer.join()
        total = store.head_position()
        wait_until(lambda: published(bootstrap) >= total, timeout=60, what="every event in the topic")
        relay.terminate()
        assert relay.wait(30) == 143, (tmp_path / "relay.log").read_text()   # SIGTERM: stopped cleanly
    finally:
        if relay.poll() is None:   # a failed wait: the relay must not outlive the test
            relay.kill()
            relay.wait()

    assert_topic_holds_the_store(bootstrap, TOPIC, store)
    assert_projections_from_topic_equal_store(bootstrap, TOPIC, store, tmp_path / "topic_views.db")
    store.close()
