"""Client-side components against librdkafka's mock cluster: three brokers, partition
leaders spread over them, bootstrapped from one broker only. A second implementation of
the Kafka protocol, so nothing here can lean on how Headwater answers (one node, id 0,
every leader and coordinator the bootstrap broker). The mock lacks the admin APIs
(CreateTopics, DescribeConfigs, ListGroups, DescribeGroups, ...: docs/scaling.md lists
them); the commands that need them must say so in one line."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading

import pytest
from confluent_kafka import Consumer, TopicPartition

from headwater.cdc.sqlite import SqliteConnector
from headwater.push.receiver import WebhookReceiver
from headwater.testing import MockKafkaCluster, wait_until

from tests.support.cdc_sources import drained, make_db, query
from tests.support.cdc_topics import changes, read_topic
from tests.support.clients import confluent_produce, sample_messages


@pytest.fixture(scope="module")
def mock():
    return MockKafkaCluster(3, {topic: 4 for topic in ("cli-topic", "shop.main.items", "push-topic")})


def led_elsewhere(mock: MockKafkaCluster, topic: str) -> set[int]:
    """The topic's partitions whose leader is not the bootstrap broker (there must be some)."""
    bootstrap_id = next(iter(mock.brokers))
    others = {p for p, leader in mock.leaders(topic).items() if leader != bootstrap_id}
    assert others, f"every partition of {topic} is led by the bootstrap broker: the test proves nothing"
    return others


def headwater(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, timeout=120)


def test_topics_and_groups_commands(mock):
    topic = "cli-topic"
    led_elsewhere(mock, topic)
    listed = headwater("topics", "list", "--json", "--bootstrap-server", mock.bootstrap)
    assert listed.returncode == 0, listed.stderr
    assert {"topic": topic, "partitions": 4} in json.loads(listed.stdout)
    # ListGroups is missing: one line naming the problem, no traceback, no empty table.
    groups = headwater("groups", "list", "--bootstrap-server", mock.bootstrap)
    assert groups.returncode == 1
    assert groups.stderr.strip().splitlines()[-1].startswith("headwater: error: 3 broker(s) could not list")
    assert "Traceback" not in groups.stderr


def test_sqlite_cdc_connector(mock, tmp_path):
    path = str(tmp_path / "shop.db")
    make_db(path, "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT);"
                  + "".join(f"INSERT INTO items VALUES ({i}, 'item{i}');" for i in range(1, 21)))
    stop = threading.Event()
    connector = SqliteConnector(path, ["items"], "shop", mock.bootstrap, log=lambda _: None)
    thread = threading.Thread(target=connector.run, kwargs={"should_stop": stop.is_set}, daemon=True)
    thread.start()
    wait_until(lambda: shipped(path) or not thread.is_alive(), timeout=60, what="the snapshot")
    query(path, "UPDATE items SET name = 'renamed' WHERE id <= 10")
    query(path, "DELETE FROM items WHERE id > 15")
    wait_until(lambda: shipped(path) or not thread.is_alive(), timeout=60, what="changelog trimmed")
    assert thread.is_alive(), "the connector stopped"
    stop.set()
    thread.join(30)

    others = led_elsewhere(mock, "shop.main.items")
    records = read_topic(mock.bootstrap, "shop.main.items")
    assert {r["partition"] for r in records} & others
    ops = sorted((e["op"], e["after"]["id"] if e["after"] else e["before"]["id"]) for e in changes(records))
    assert ops == sorted([("r", i) for i in range(1, 21)] + [("u", i) for i in range(1, 11)]
                         + [("d", i) for i in range(16, 21)])
    final = {}
    for r in records:
        final[r["key"]["id"]] = r["value"]
    assert {k for k, v in final.items() if v is None} == set(range(16, 21))  # tombstones last


def shipped(path: str) -> bool:
    try:
        return drained(path)
    except sqlite3.OperationalError:  # the connector has not set up its changelog yet
        return False


def test_push_subscription(mock):
    topic = "push-topic"
    others = led_elsewhere(mock, topic)
    truth = {(topic, p, o): v for p, o, _, v, _ in confluent_produce(mock.bootstrap, topic, sample_messages(80))}
    with WebhookReceiver() as receiver:
        proc = subprocess.Popen([sys.executable, "-m", "headwater", "push", topic, receiver.url, "--group", "g-push",
                                 "--bootstrap-server", mock.bootstrap, "--from-beginning"])
        try:
            wait_until(lambda: len(receiver.acknowledged) == len(truth), timeout=90, what="all acknowledged")
            consumer = Consumer({"bootstrap.servers": mock.bootstrap, "group.id": "g-push"})
            ends = {p: max(o for (_, q, o) in truth if q == p) + 1 for p in {p for _, p, _ in truth}}
            wait_until(lambda: {tp.partition: tp.offset for tp in consumer.committed(
                [TopicPartition(topic, p) for p in ends], timeout=10)} == ends, what="offsets committed")
            consumer.close()
        finally:
            proc.terminate()
            assert proc.wait(30) == 143  # SIGTERM: stopped cleanly
    assert receiver.acknowledged_values() == truth
    assert {p for _, p, _ in truth} & others
