"""/metrics' text written in bulk (http/exposition.py) is generate_latest's, byte for byte: on
families made to hit every case the bulk path must leave to the library, and on a broker with
several topics, partitions and consumer groups, whose offsets and lags are checked against the
broker's logs and commits read here in plain Python."""
import asyncio

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.groups.group import CommittedOffset
from headwater.http.exposition import _gauge_lines, exposition
from headwater.http.metrics import BrokerMetrics
from headwater.records import Record, encode_batch

TRICKY = ["plain", 'quo"te', "back\\slash", "new\nline", "ünïcode", "", "0"]
VALUES = [0, -3, 7, 999_999, 1_000_000, 123_456_789, 2**53 + 1, 0.25, 1e-9, float("inf"), float("-inf"), float("nan")]


class Fixed(Collector):
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def families() -> list:
    wide = GaugeMetricFamily("tricky_gauge", 'Help with "quotes", a \\ and a\nnewline', labels=["topic", "partition"])
    for i, value in enumerate(VALUES):
        wide.add_metric([TRICKY[i % len(TRICKY)], TRICKY[(i + 3) % len(TRICKY)]], value)
    stamped = GaugeMetricFamily("stamped", "A sample with a timestamp", labels=["a"])
    stamped.add_metric(["x"], 1, timestamp=12.5)
    short = GaugeMetricFamily("short_labels", "A sample given fewer label values than names", labels=["a", "b"])
    short.add_metric(["x", "y"], 1)
    short.add_metric(["x"], 2)
    extra = GaugeMetricFamily("extra_label", "A sample with a label more than the first's", labels=["a"])
    extra.add_metric(["x"], 1)
    extra.add_sample("extra_label", {"a": "y", "b": "z"}, 2)
    odd_label = GaugeMetricFamily("odd_label", "A label name the library escapes", labels=["a.b"])
    odd_label.add_metric(["x"], 1)
    counter = CounterMetricFamily("a_counter", "A counter", labels=["k"])
    counter.add_metric(["v"], 3, created=1700000000.0)
    return [GaugeMetricFamily("unlabelled", "One value", value=4), wide, stamped, short, extra, odd_label, counter,
            GaugeMetricFamily("empty", "No samples", labels=["a"])]


def test_bulk_gauge_lines_are_generate_latest_bytes():
    assert _gauge_lines(families()[1]) is not None   # the tricky gauge is written in bulk, not left to the library
    assert exposition(families()) == generate_latest(Fixed(families()))


def append(broker: Broker, topic: str, partition: int, count: int) -> None:
    batch = encode_batch([Record(i, 0, b"k", b"v" * i, []) for i in range(count)])
    assert broker.appender.append(topic, partition, batch).error == 0


def test_a_brokers_scrape_is_generate_latests_and_its_state(tmp_path):
    broker = Broker(BrokerConfig(data_dir=tmp_path / "data", flush="never"))
    topics = {"one": 1, "ten": 10, "hundred": 100}
    for name, partitions in topics.items():
        broker.log_manager.create_topic(name, partitions, {})
        for p in range(partitions):
            append(broker, name, p, 1 + p % 4)
    asyncio.run(broker.groups.commit("readers", -1, "", None, {("hundred", p): CommittedOffset(p % 3) for p in range(0, 100, 2)}))
    asyncio.run(broker.groups.commit("idle", -1, "", None, {("one", 0): CommittedOffset(1)}))
    registry = BrokerMetrics(broker, lambda: 2).registry
    text = exposition(registry.collect()).decode()
    assert text == generate_latest(registry).decode()
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    for name in topics:
        for p, log in enumerate(broker.log_manager.topics[name].partitions):
            labels = (("partition", str(p)), ("topic", name))
            assert samples["kafka_topic_partition_current_offset", labels] == 1 + p % 4
            assert samples["kafka_topic_partition_oldest_offset", labels] == 0
            assert samples["kafka_log_log_size", labels] == sum(s.size for s in log.segments)
    for group in ("readers", "idle"):
        committed = broker.groups.committed(group)
        topics = {topic for topic, _ in committed}
        for topic in topics:
            for p in range(len(broker.log_manager.topics[topic].partitions)):
                labels = (("consumergroup", group), ("partition", str(p)), ("topic", topic))
                end = 1 + p % 4
                offset = committed.get((topic, p))
                assert samples["kafka_consumergroup_lag", labels] == max(end - (offset.offset if offset else 0), 0)
                assert samples.get(("kafka_consumergroup_current_offset", labels)) == (offset and offset.offset)
    assert samples["kafka_server_socketservermetrics_connection_count", ()] == 2
    broker.close()
