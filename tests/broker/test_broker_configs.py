"""Dynamic broker configs through the admin clients users run: the broker-level defaults of topic
configs, altered on the broker resource (its id, or the empty name for the cluster-wide default),
described with their source, inherited by topics without an override, kept across a restart;
read-only settings and bad values refused with INVALID_REQUEST, as Kafka does, changing nothing.
Neither confluent-kafka nor kafka-python can name the cluster-wide default (an empty broker
name: Kafka's `kafka-configs --entity-default`), so that level is reached over the wire."""
from __future__ import annotations

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, \
    KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource as KPConfigResource, ConfigResourceType
from kafka.protocol.admin import DescribeConfigsRequest, IncrementalAlterConfigsRequest

from headwater.log import LogConfig

from tests.support.wire import Wire

KAFKA_DEFAULTS = LogConfig().to_topic_configs()
THIS_BROKER = ConfigResource("broker", "0")
BROKER_TYPE, SET, INVALID_REQUEST = 4, 0, 42


def _set_over_wire(bootstrap, broker_name: str, **configs) -> tuple[int, str | None]:
    """IncrementalAlterConfigs SET on a broker resource (the empty name: the cluster-wide default)."""
    R = IncrementalAlterConfigsRequest[1]
    Resource = R.AlterConfigsResource
    request = R(resources=[Resource(resource_type=BROKER_TYPE, resource_name=broker_name, configs=[
        Resource.AlterableConfig(name=name, config_operation=SET, value=value) for name, value in configs.items()])],
        validate_only=False)
    wire = Wire(bootstrap)
    try:
        response = wire.request(request, 1).responses[0]
    finally:
        wire.close()
    return response.error_code, response.error_message


def _describe_cluster_default(bootstrap) -> dict[str, tuple[str, int]]:
    R = DescribeConfigsRequest[4]
    request = R(resources=[R.DescribeConfigsResource(resource_type=BROKER_TYPE, resource_name="",
                                                     configuration_keys=None)],
                include_synonyms=False, include_documentation=False)
    wire = Wire(bootstrap)
    try:
        result = wire.request(request, 4).results[0]
    finally:
        wire.close()
    assert result.error_code == 0
    return {c.name: (c.value, c.config_source) for c in result.configs}


def _describe(admin, resource):
    return {name: (entry.value, entry.source)
            for name, entry in admin.describe_configs([resource])[resource].result(30).items()}


def _set(admin, resource, **configs):
    ops = ConfigResource(resource.restype, resource.name, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in configs.items()])
    admin.incremental_alter_configs([ops])[ops].result(30)


def _timestamp_type(bootstrap, topic) -> int:
    """The timestamp type of a record produced to ``topic`` now, as a consumer reads it."""
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, b"v", timestamp=1_000)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    try:
        end = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1]
        consumer.assign([TopicPartition(topic, 0, end - 1)])
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        return message.timestamp()[0]
    finally:
        consumer.close()


def test_broker_level_defaults_are_altered_inherited_and_kept_across_a_restart(broker):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    created = admin.create_topics([NewTopic("inherits", 1, 1), NewTopic("later", 1, 1),
                                   NewTopic("own", 1, 1, config={"retention.ms": "5000"})])
    for future in created.values():
        future.result(30)
    assert _timestamp_type(broker.bootstrap, "inherits") == TIMESTAMP_CREATE_TIME

    _set(admin, THIS_BROKER, **{"log.retention.ms": "123000", "log.message.timestamp.type": "LogAppendTime"})
    assert _set_over_wire(broker.bootstrap, "", **{"log.retention.ms": "1", "log.retention.bytes": "4096"}) == \
        (0, None)

    def check():
        described = _describe(admin, THIS_BROKER)
        assert described["log.retention.ms"] == ("123000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)  # broker wins
        assert described["log.retention.bytes"] == ("4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert described["log.segment.bytes"] == (KAFKA_DEFAULTS["segment.bytes"], ConfigSource.DEFAULT_CONFIG.value)
        assert described["log.flush.offset.checkpoint.interval.ms"] == ("60000", ConfigSource.STATIC_BROKER_CONFIG.value)
        assert _describe_cluster_default(broker.bootstrap) == {  # as Kafka: only what is set on the default resource
            "log.retention.ms": ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value),
            "log.retention.bytes": ("4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)}
        inherits = _describe(admin, ConfigResource("topic", "inherits"))
        assert inherits["retention.ms"] == ("123000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        assert inherits["retention.bytes"] == ("4096", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
        assert _describe(admin, ConfigResource("topic", "own"))["retention.ms"] == \
            ("5000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    check()
    # in effect on a topic that existed before, and on one created after
    assert _timestamp_type(broker.bootstrap, "inherits") == TIMESTAMP_LOG_APPEND_TIME
    admin.create_topics([NewTopic("created-after", 1, 1)])["created-after"].result(30)
    assert _timestamp_type(broker.bootstrap, "created-after") == TIMESTAMP_LOG_APPEND_TIME

    broker.stop()
    broker.start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    check()
    assert _timestamp_type(broker.bootstrap, "later") == TIMESTAMP_LOG_APPEND_TIME

    # DELETE: back to what the level below says
    ops = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([ops])[ops].result(30)
    assert _describe(admin, ConfigResource("topic", "inherits"))["retention.ms"] == \
        ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)


@pytest.mark.parametrize("name, value, fragment", [
    ("broker.id", "7", "Cannot update these configs dynamically"),
    ("log.retention.check.interval.ms", "1000", "Cannot update these configs dynamically"),
    ("no.such.config", "1", "Cannot update these configs dynamically"),
    ("log.retention.ms", "soon", "log.retention.ms"),
    ("log.cleanup.policy", "shred", "log.cleanup.policy"),
])
def test_read_only_names_and_bad_values_are_refused_and_change_nothing(broker, name, value, fragment):
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    before = _describe(admin, THIS_BROKER)
    with pytest.raises(KafkaException) as refused:  # the valid retention.bytes beside it is not applied either
        _set(admin, THIS_BROKER, **{"log.retention.bytes": "1", name: value})
    assert refused.value.args[0].name() == "INVALID_REQUEST"
    assert fragment in refused.value.args[0].str()
    error, message = _set_over_wire(broker.bootstrap, "", **{"log.retention.bytes": "1", name: value})
    assert error == INVALID_REQUEST and fragment in message
    assert _describe(admin, THIS_BROKER) == before
    assert _describe_cluster_default(broker.bootstrap) == {}
    assert _set_over_wire(broker.bootstrap, "1", **{"log.retention.ms": "1"})[0] == INVALID_REQUEST  # no broker 1


def test_kafka_python_alters_and_describes_broker_configs(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        resource = KPConfigResource(ConfigResourceType.BROKER, "0", configs={"log.cleaner.min.cleanable.ratio": "0.2"})
        assert admin.alter_configs([resource]) == {"broker": {"0": "OK"}}
        described = admin.describe_configs([KPConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all")
        entry = described["broker"]["0"]["log.cleaner.min.cleanable.ratio"]
        assert entry["value"] == "0.2"
        admin.create_topics({"ratio": {"num_partitions": 1, "replication_factor": 1}})
        topic = admin.describe_configs([KPConfigResource(ConfigResourceType.TOPIC, "ratio")], config_filter="all")
        assert topic["topic"]["ratio"]["min.cleanable.dirty.ratio"]["value"] == "0.2"
        read_only = [KPConfigResource(ConfigResourceType.BROKER, "0", configs={"broker.id": "3"})]
        with pytest.raises(ValueError, match="broker.id"):  # kafka-python knows it read-only from the describe
            admin.alter_configs(read_only)
        refused = admin.alter_configs(read_only, raise_on_unknown=False)  # and the broker refuses it too
        assert "Cannot update these configs dynamically" in refused["broker"]["0"]
    finally:
        admin.close()
