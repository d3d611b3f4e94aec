"""Fetch sessions (KIP-227) with real clients: kafka-python fetches incrementally once the
broker opens sessions and idle fetches come back empty; librdkafka (which never asks for a
session) still reads everything; a broker restart and evictions cost clients nothing.

What the broker did is read from its /metrics (Kafka's FetchSessionCache gauges and the
broker's own fetch counters); what the clients got is compared with what was produced."""
import time

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from headwater.testing import BrokerProcess, wait_until

from tests.support.clients import confluent_consume
from tests.http.test_metrics_http import scrape

PARTITIONS = 120


def metric(broker, name: str, **labels) -> float:
    return scrape(broker).get((name, tuple(sorted(labels.items()))), 0)


def sessions(broker) -> float:
    return metric(broker, "kafka_server_fetchsessioncache_numincrementalfetchsessions")


def produce(bootstrap: str, topic: str, per_partition: dict[int, int], tag: str = "") -> dict[int, list[bytes]]:
    """``per_partition[p]`` records to each partition p; returns the values sent to each, in order."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    sent = {p: [f"{tag}{p}-{i}".encode() for i in range(n)] for p, n in per_partition.items()}
    for p, values in sent.items():
        for value in values:
            producer.send(topic, value=value, partition=p)
    producer.flush(60)
    producer.close()
    return sent


def consumer_on(bootstrap: str, topic: str, partitions) -> KafkaConsumer:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             fetch_max_wait_ms=100, auto_offset_reset="earliest")
    consumer.assign([TopicPartition(topic, p) for p in partitions])
    return consumer


def drain(consumers: dict[str, KafkaConsumer], expected: dict[str, dict[int, list[bytes]]],
          got: dict[str, dict[int, list[bytes]]], timeout: float = 60) -> None:
    """Poll every consumer in turn until each has what ``expected`` says for it, in order."""
    deadline = time.monotonic() + timeout
    while any(got[name] != expected[name] for name in consumers) and time.monotonic() < deadline:
        for name, consumer in consumers.items():
            for tp, messages in consumer.poll(timeout_ms=100).items():
                got[name].setdefault(tp.partition, []).extend(m.value for m in messages)
    for name in consumers:
        assert got[name] == expected[name], name


def idle(consumer: KafkaConsumer, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert consumer.poll(timeout_ms=100) == {}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("sessions") / "data", "--http-listener", "127.0.0.1:0",
                       "--num-partitions", str(PARTITIONS)) as proc:
        yield proc


def test_kafka_python_fetches_incrementally_and_idle_fetches_carry_nothing(broker):
    sent = produce(broker.bootstrap, "many", {p: p % 4 for p in range(PARTITIONS)})
    consumer = consumer_on(broker.bootstrap, "many", range(PARTITIONS))
    got: dict[str, dict[int, list[bytes]]] = {"kp": {}}
    drain({"kp": consumer}, {"kp": {p: v for p, v in sent.items() if v}}, got)
    assert sessions(broker) == 1
    assert metric(broker, "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached") == PARTITIONS

    before = scrape(broker)
    idle(consumer, 1.5)
    after = scrape(broker)
    fetches = ("headwater_fetch_requests_total", (("kind", "incremental"),))
    answered = ("headwater_fetch_incremental_partitions_answered_total", ())
    assert after[fetches] - before[fetches] >= 3           # each 100 ms long poll is one incremental fetch...
    assert after[answered] == before[answered]             # ...and none carried a partition

    more = produce(broker.bootstrap, "many", {3: 2, 77: 1}, tag="more-")
    drain({"kp": consumer}, {"kp": {p: sent[p] + more.get(p, []) for p in sent if sent[p] or p in more}}, got)
    assert scrape(broker)[answered] - after[answered] >= 2   # the session told of the two partitions that grew
    consumer.close()


def test_librdkafka_fetches_without_a_session_and_reads_everything(broker):
    sent = produce(broker.bootstrap, "plain", {p: 3 for p in range(0, PARTITIONS, 7)})
    open_before = sessions(broker)
    full = ("headwater_fetch_requests_total", (("kind", "full"),))
    before = scrape(broker)[full]
    got = confluent_consume(broker.bootstrap, "plain", list(sent), sum(map(len, sent.values())),
                            **{"fetch.wait.max.ms": 100})
    assert {p: [m[3] for m in got if m[0] == p] for p in sent} == sent
    assert scrape(broker)[full] > before and sessions(broker) == open_before


def test_a_broker_restart_mid_session_loses_nothing(start_broker):
    broker = start_broker("--http-listener", "127.0.0.1:0", "--num-partitions", "40")
    sent = produce(broker.bootstrap, "restarted", {p: 2 for p in range(40)}, tag="before-")
    consumer = consumer_on(broker.bootstrap, "restarted", range(40))
    got: dict[str, dict[int, list[bytes]]] = {"kp": {}}
    drain({"kp": consumer}, {"kp": sent}, got)
    assert sessions(broker) == 1
    time.sleep(0.5)   # the last 100 ms long poll is answered: the client's next fetch continues its session
    broker.stop()
    broker.restart()
    assert sessions(broker) == 0                       # sessions live in memory: the client must start over
    later = produce(broker.bootstrap, "restarted", {p: 1 for p in range(0, 40, 3)}, tag="after-")
    drain({"kp": consumer}, {"kp": {p: sent[p] + later.get(p, []) for p in sent}}, got)
    wait_until(lambda: sessions(broker) == 1, what="the consumer opened a new session")
    assert metric(broker, "headwater_fetch_session_errors_total", error="FETCH_SESSION_ID_NOT_FOUND") == 1
    consumer.close()


def test_evicted_sessions_fall_back_and_both_consumers_progress(start_broker):
    broker = start_broker("--http-listener", "127.0.0.1:0", "--num-partitions", "30",
                          "--max-incremental-fetch-session-cache-slots", "1")
    sent = produce(broker.bootstrap, "crowded", {p: 2 for p in range(30)})
    small = consumer_on(broker.bootstrap, "crowded", range(10))
    got: dict[str, dict[int, list[bytes]]] = {"small": {}, "large": {}}
    drain({"small": small}, {"small": {p: sent[p] for p in range(10)}}, got)
    assert sessions(broker) == 1
    large = consumer_on(broker.bootstrap, "crowded", range(30))   # more partitions: it takes the only slot
    expected = {"small": got["small"], "large": sent}
    drain({"small": small, "large": large}, expected, got)
    more = produce(broker.bootstrap, "crowded", {p: 1 for p in range(0, 30, 4)}, tag="more-")
    expected = {"small": {p: sent[p] + more.get(p, []) for p in range(10)},
                "large": {p: sent[p] + more.get(p, []) for p in range(30)}}
    drain({"small": small, "large": large}, expected, got)
    assert metric(broker, "kafka_server_fetchsessioncache_incrementalfetchsessionevictions_total") == 1
    assert metric(broker, "headwater_fetch_session_errors_total", error="FETCH_SESSION_ID_NOT_FOUND") >= 1
    assert sessions(broker) == 1
    small.close()
    large.close()
