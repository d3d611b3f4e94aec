"""Topic configuration through the admin clients users run: confluent-kafka's AdminClient
(librdkafka) and kafka-python's KafkaAdminClient. Create with configs, describe, alter
(incrementally and by full replacement), DeleteRecords, DescribeLogDirs; bad input is
refused with INVALID_CONFIG and changes nothing."""
from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient, TopicPartition as KPTopicPartition
from kafka.admin import ConfigResource as KPConfigResource, ConfigResourceType
from kafka.errors import InvalidConfigurationError

from headwater.log import LogConfig

from tests.support.clients import confluent_consume, confluent_produce

KAFKA_DEFAULTS = LogConfig().to_topic_configs()


def _admin(broker):
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin, name, partitions=1, **configs):
    admin.create_topics([NewTopic(name, partitions, 1, config=configs)])[name].result(30)


def _describe(admin, topic):
    resource = ConfigResource("topic", topic)
    return admin.describe_configs([resource])[resource].result(30)


def _values(admin, topic):
    return {name: entry.value for name, entry in _describe(admin, topic).items()}


def _incremental(admin, topic, *ops):
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=op) for name, value, op in ops])
    return admin.incremental_alter_configs([resource])[resource].result(30)


def test_confluent_create_describe_alter(broker):
    admin = _admin(broker)
    _create(admin, "orders", 2, **{"cleanup.policy": "compact", "retention.ms": "3600000"})
    described = _describe(admin, "orders")
    # Every supported config is described; the overrides as dynamic topic configs, the rest as defaults.
    assert set(described) == set(KAFKA_DEFAULTS)
    assert described["cleanup.policy"].value == "compact"
    assert described["cleanup.policy"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert described["retention.ms"].value == "3600000"
    expected_defaults = {k: v for k, v in KAFKA_DEFAULTS.items() if k not in ("cleanup.policy", "retention.ms")}
    assert {k: e.value for k, e in described.items() if e.source == ConfigSource.DEFAULT_CONFIG.value} \
        == expected_defaults

    _incremental(admin, "orders", ("retention.ms", "60000", AlterConfigOpType.SET),
                 ("cleanup.policy", "delete", AlterConfigOpType.APPEND),
                 ("max.message.bytes", "2000", AlterConfigOpType.SET))
    values = _values(admin, "orders")
    assert (values["retention.ms"], values["cleanup.policy"], values["max.message.bytes"]) == \
        ("60000", "compact,delete", "2000")

    _incremental(admin, "orders", ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT),
                 ("retention.ms", None, AlterConfigOpType.DELETE))
    values = _values(admin, "orders")
    assert (values["retention.ms"], values["cleanup.policy"]) == (KAFKA_DEFAULTS["retention.ms"], "compact")

    # AlterConfigs replaces every override: what is not named returns to its default.
    resource = ConfigResource("topic", "orders", set_config={"segment.bytes": "1048576"})
    admin.alter_configs([resource])[resource].result(30)
    values = _values(admin, "orders")
    assert values["segment.bytes"] == "1048576"
    assert values["cleanup.policy"] == KAFKA_DEFAULTS["cleanup.policy"]
    assert values["max.message.bytes"] == KAFKA_DEFAULTS["max.message.bytes"]


def test_configs_survive_a_restart(broker):
    admin = _admin(broker)
    _create(admin, "kept", 1, **{"retention.bytes": "123456"})
    _incremental(admin, "kept", ("min.cleanable.dirty.ratio", "0.1", AlterConfigOpType.SET))
    broker.stop()
    broker.restart()
    values = _values(_admin(broker), "kept")
    assert (values["retention.bytes"], values["min.cleanable.dirty.ratio"]) == ("123456", "0.1")


@pytest.mark.parametrize("configs, fragment", [
    ({"retention.msec": "1000"}, "retention.msec"),
    ({"cleanup.policy": "shred"}, "cleanup.policy"),
    ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
    ({"message.timestamp.type": "WallClock"}, "message.timestamp.type"),
    ({"segment.bytes": "big"}, "segment.bytes"),
])
def test_bad_configs_are_refused_and_change_nothing(broker, configs, fragment):
    admin = _admin(broker)
    for validate_only in (True, False):  # a dry run answers what the create does
        with pytest.raises(KafkaException) as created:
            admin.create_topics([NewTopic("refused", 1, 1, config=configs)],
                                validate_only=validate_only)["refused"].result(30)
        assert created.value.args[0].name() == "INVALID_CONFIG"
        assert fragment in created.value.args[0].str()
        assert "refused" not in admin.list_topics(timeout=30).topics

    _create(admin, "steady", 1, **{"retention.ms": "5000"})
    before = _values(admin, "steady")
    name, value = next(iter(configs.items()))
    ops = [("retention.ms", "1", AlterConfigOpType.SET), (name, value, AlterConfigOpType.SET)]
    with pytest.raises(KafkaException) as altered:
        _incremental(admin, "steady", *ops)
    assert altered.value.args[0].name() == "INVALID_CONFIG"
    assert fragment in altered.value.args[0].str()
    resource = ConfigResource("topic", "steady", set_config=configs)
    with pytest.raises(KafkaException) as replaced:
        admin.alter_configs([resource])[resource].result(30)
    assert replaced.value.args[0].name() == "INVALID_CONFIG"
    assert _values(admin, "steady") == before  # the valid retention.ms=1 in the same request was not applied


def test_validate_only_creates_nothing(broker):
    admin = _admin(broker)
    good = NewTopic("dry", 2, 1, config={"cleanup.policy": "compact", "retention.ms": "5000"})
    assert admin.create_topics([good], validate_only=True)["dry"].result(30) is None
    assert "dry" not in admin.list_topics(timeout=30).topics
    with pytest.raises(KafkaException) as illegal:
        admin.create_topics([NewTopic("no/slash", 1, 1)], validate_only=True)["no/slash"].result(30)
    assert illegal.value.args[0].name() == "TOPIC_EXCEPTION"  # librdkafka's name for INVALID_TOPIC_EXCEPTION
    _create(admin, "dry", 2, **good.config)  # really, now: it did not exist
    assert _values(admin, "dry")["retention.ms"] == "5000"


def test_append_to_a_non_list_config_is_refused(broker):
    admin = _admin(broker)
    _create(admin, "scalar", 1)
    with pytest.raises(KafkaException) as exc:
        _incremental(admin, "scalar", ("retention.ms", "5", AlterConfigOpType.APPEND))
    assert exc.value.args[0].name() == "INVALID_CONFIG"
    assert _values(admin, "scalar")["retention.ms"] == KAFKA_DEFAULTS["retention.ms"]


def test_unknown_topic(broker):
    admin = _admin(broker)
    resource = ConfigResource("topic", "nowhere")
    with pytest.raises(KafkaException) as exc:
        admin.describe_configs([resource])[resource].result(30)
    assert exc.value.args[0].name() == "UNKNOWN_TOPIC_OR_PART"  # librdkafka's name


def test_broker_resource_is_described(broker):
    admin = _admin(broker)
    resource = ConfigResource("broker", "0")
    described = admin.describe_configs([resource])[resource].result(30)
    assert described["message.max.bytes"].value == "1048588"
    assert described["message.max.bytes"].is_read_only


def test_delete_records_moves_the_log_start(broker):
    admin = _admin(broker)
    _create(admin, "trimmed", 1)
    sent = [(f"k{i}".encode(), f"v{i}".encode(), []) for i in range(20)]
    confluent_produce(broker.bootstrap, "trimmed", sent)
    result = admin.delete_records([TopicPartition("trimmed", 0, 12)])
    deleted = next(iter(result.values())).result(30)
    assert deleted.low_watermark == 12
    got = confluent_consume(broker.bootstrap, "trimmed", [0], 8)
    assert [(offset, key) for _, offset, key, _, _ in got] == [(i, f"k{i}".encode()) for i in range(12, 20)]
    with pytest.raises(KafkaException) as exc:
        next(iter(admin.delete_records([TopicPartition("trimmed", 0, 99)]).values())).result(30)
    assert exc.value.args[0].name() == "OFFSET_OUT_OF_RANGE"


def test_kafka_python_admin(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics({"ledger": {"num_partitions": 2, "replication_factor": 1,
                                        "configs": {"cleanup.policy": "compact", "segment.bytes": "65536"}}})
        topic = KPConfigResource(ConfigResourceType.TOPIC, "ledger")
        modified = admin.describe_configs([topic])["topic"]["ledger"]
        assert {name: c["value"] for name, c in modified.items()} == \
            {"cleanup.policy": "compact", "segment.bytes": "65536"}
        everything = admin.describe_configs([topic], config_filter="all")["topic"]["ledger"]
        assert set(everything) == set(KAFKA_DEFAULTS)

        changed = admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, "ledger",
                                                        configs={"retention.ms": "1000"})])
        assert changed == {"topic": {"ledger": "OK"}}
        modified = admin.describe_configs([topic])["topic"]["ledger"]
        assert modified["retention.ms"]["value"] == "1000"
        assert modified["cleanup.policy"]["value"] == "compact"  # incremental: the other overrides stay

        refused = admin.alter_configs([KPConfigResource(ConfigResourceType.TOPIC, "ledger",
                                                        configs={"retention.ms": "soon"})])
        assert "InvalidConfigurationError" in refused["topic"]["ledger"]
        assert "retention.ms" in refused["topic"]["ledger"]
        assert admin.describe_configs([topic])["topic"]["ledger"]["retention.ms"]["value"] == "1000"
        with pytest.raises(InvalidConfigurationError):
            admin.create_topics({"bad": {"num_partitions": 1, "configs": {"retention.ms": "-7"}}})

        delivered = confluent_produce(broker.bootstrap, "ledger", [(b"k", str(i).encode(), []) for i in range(10)])
        partition = delivered[0][0]  # one key: one partition
        low = admin.delete_records({KPTopicPartition("ledger", partition): 4})
        assert [m["low_watermark"] for m in low.values()] == [4]

        dirs = admin.describe_log_dirs()
        sizes = {(t["name"], p["partition_index"]): p["partition_size"]
                 for d in dirs for r in d["log_dirs"] for t in r["topics"] for p in t["partitions"]}
        assert sizes[("ledger", partition)] > 0
        assert sizes[("ledger", 1 - partition)] == 0
    finally:
        admin.close()

