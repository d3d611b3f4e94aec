"""Admin APIs that kafka-python's and confluent-kafka's admin clients call (issue 11):
CreatePartitions, CreateTopics with a replica assignment, OffsetDelete, DescribeCluster,
DescribeTopicPartitions."""
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions
from confluent_kafka.admin import NewTopic as ConfluentTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka import errors as kafka_errors
from kafka.admin import NewTopic
from kafka.structs import OffsetAndMetadata
from kafka.protocol.admin import CreatePartitionsRequest

from headwater.protocol.errors import ErrorCode
from headwater.records import Compression, decode_records, iter_batches
from headwater.testing import BrokerProcess

from tests.broker.test_bad_input import fetch
from tests.cli.test_topics_cli import headwater
from tests.support.wire import Wire


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("admin") / "data", "--num-partitions", "1").start()
    yield proc.bootstrap
    proc.stop()


@pytest.fixture(scope="module")
def admin(bootstrap):
    client = KafkaAdminClient(bootstrap_servers=bootstrap)
    yield client
    client.close()


def _partition_count(admin, topic):
    return len(admin.describe_topics([topic])[0]["partitions"])


def test_create_partitions_at_the_wire(bootstrap, admin):
    admin.create_topics([NewTopic("grow-wire", 2, 1)])
    R = CreatePartitionsRequest[3]
    T, A = R.CreatePartitionsTopic, R.CreatePartitionsTopic.CreatePartitionsAssignment
    wire = Wire(bootstrap)

    def ask(name, count, assignments=None, validate_only=False):
        request = R(topics=[T(name=name, count=count, assignments=assignments)], timeout_ms=5000,
                    validate_only=validate_only)
        result = wire.request(request, 3).results[0]
        return result.error_code
    assert ask("grow-wire", 4, validate_only=True) == 0
    assert _partition_count(admin, "grow-wire") == 2  # validate-only changes nothing
    assert ask("grow-wire", 2) == ErrorCode.INVALID_PARTITIONS  # never the same or fewer
    assert ask("grow-wire", 1) == ErrorCode.INVALID_PARTITIONS
    assert ask("nowhere", 3) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert ask("grow-wire", 3, [A(broker_ids=[1])]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert ask("grow-wire", 4, [A(broker_ids=[0])]) == ErrorCode.INVALID_REPLICA_ASSIGNMENT  # one for two new
    assert ask("grow-wire", 3, [A(broker_ids=[0])]) == 0
    assert ask("grow-wire", 5) == 0
    assert _partition_count(admin, "grow-wire") == 5


def test_clients_pick_up_added_partitions(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([ConfluentTopic("grow", 1)])["grow"].result(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "grow", "auto.offset.reset": "earliest",
                         "topic.metadata.refresh.interval.ms": 500})
    consumer.subscribe(["grow"])
    consumer.poll(3)
    validated = admin.create_partitions([NewPartitions("grow", 3)], validate_only=True)["grow"]
    validated.result(30)
    admin.create_partitions([NewPartitions("grow", 3)])["grow"].result(30)
    with pytest.raises(KafkaException):
        admin.create_partitions([NewPartitions("grow", 2)])["grow"].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 500})
    sent = {(p, b"%d-%d" % (p, i)) for p in range(3) for i in range(5)}
    for p, value in sent:
        producer.produce("grow", partition=p, value=value)  # the producer knows partitions 1 and 2 now
    assert producer.flush(30) == 0
    got = set()
    for _ in range(60):
        for msg in consumer.consume(50, timeout=1):
            assert msg.error() is None, msg.error()
            got.add((msg.partition(), msg.value()))
        if got == sent:
            break
    consumer.close()
    assert got == sent  # the group's consumer was assigned the new partitions too


def test_kafka_python_create_partitions(admin):
    admin.create_topics([NewTopic("grow-kp", 1, 1)])
    admin.create_partitions({"grow-kp": 4}, validate_only=True)
    assert _partition_count(admin, "grow-kp") == 1
    admin.create_partitions({"grow-kp": 4})
    assert _partition_count(admin, "grow-kp") == 4
    with pytest.raises(kafka_errors.InvalidPartitionsError):
        admin.create_partitions({"grow-kp": 4})


def test_create_topics_with_a_replica_assignment_naming_this_broker(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([ConfluentTopic("assigned", 3, replica_assignment=[[0], [0], [0]])])
    created["assigned"].result(30)
    assert len(admin.list_topics("assigned", timeout=10).topics["assigned"].partitions) == 3
    refused = admin.create_topics([ConfluentTopic("assigned-elsewhere", 2, replica_assignment=[[0], [1]])])
    with pytest.raises(KafkaException) as error:
        refused["assigned-elsewhere"].result(30)
    assert error.value.args[0].code() == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert "assigned-elsewhere" not in admin.list_topics(timeout=10).topics


def test_kafka_python_creates_a_topic_with_a_replica_assignment(admin):
    admin.create_topics([NewTopic("assigned-kp", -1, -1, replica_assignments={0: [0], 1: [0]})])
    assert _partition_count(admin, "assigned-kp") == 2
    with pytest.raises(kafka_errors.InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic("assigned-kp-elsewhere", -1, -1, replica_assignments={0: [1]})])


def test_offset_delete(bootstrap, admin):
    admin.create_topics([NewTopic("offsets-gone", 2, 1)])
    tps = [TopicPartition("offsets-gone", p) for p in range(2)]
    idle = KafkaConsumer(bootstrap_servers=bootstrap, group_id="idle", enable_auto_commit=False)
    idle.commit({tp: OffsetAndMetadata(7, "", -1) for tp in tps})
    idle.close()
    assert admin.delete_group_offsets("idle", [tps[0]]) == {tps[0]: kafka_errors.NoError}
    remaining = admin.list_group_offsets({"idle": None})["idle"]
    assert {tp: o.offset for tp, o in remaining.items()} == {tps[1]: 7}
    # a live group keeps the offsets of the topics it subscribes to
    live = KafkaConsumer("offsets-gone", bootstrap_servers=bootstrap, group_id="live", enable_auto_commit=False)
    while not live.assignment():
        live.poll(500)
    live.commit({tps[1]: OffsetAndMetadata(3, "", -1)})
    assert admin.delete_group_offsets("live", [tps[1]]) == {tps[1]: kafka_errors.GroupSubscribedToTopicError}
    live.close()
    with pytest.raises(kafka_errors.GroupIdNotFoundError):
        admin.delete_group_offsets("nobody", [tps[0]])


def test_describe_cluster_and_topic_partitions(bootstrap, admin):
    cluster = admin.describe_cluster()
    assert [b["broker_id"] for b in cluster["brokers"]] == [0]
    assert cluster["controller_id"] == 0 and cluster["cluster_id"]
    admin.create_topics([NewTopic("described", 3, 1)])
    described = admin.describe_topic_partitions(["described"])
    (topic,) = described["topics"]
    assert topic["name"] == "described" and topic["error_code"] == 0
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"]) for p in topic["partitions"]] == \
        [(0, 0, [0]), (1, 0, [0]), (2, 0, [0])]
    first = admin.describe_topic_partitions(["described"], response_partition_limit=2)
    assert len(first["topics"][0]["partitions"]) == 2 and first["next_cursor"]["partition_index"] == 2


def test_cli_grows_a_topic(bootstrap, admin):
    admin.create_topics([NewTopic("grow-cli", 1, 1)])
    out = headwater("topics", "alter", "grow-cli", "--partitions", "3", "--bootstrap-server", bootstrap).stdout
    assert "grow-cli now has 3 partition(s)" in out
    assert _partition_count(admin, "grow-cli") == 3
    refused = headwater("topics", "alter", "grow-cli", "--partitions", "2", "--bootstrap-server", bootstrap,
                        check=False)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "cannot grow topic 'grow-cli' to 2 partitions" in refused.stderr and "must be higher" in refused.stderr
    assert _partition_count(admin, "grow-cli") == 3


# --- Kafka's topic configs: all accepted and reported; the meaningful ones honoured -----------

KAFKA_TOPIC_CONFIGS = {  # every topic config of Kafka 3.x with a valid non-default value
    "cleanup.policy": "compact,delete", "compression.type": "lz4", "compression.gzip.level": "5",
    "compression.lz4.level": "10", "compression.zstd.level": "7", "delete.retention.ms": "1000",
    "file.delete.delay.ms": "1000", "flush.messages": "1000", "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:0", "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "0:0", "local.retention.bytes": "-2", "local.retention.ms": "-2",
    "max.compaction.lag.ms": "86400000", "max.message.bytes": "2000000", "message.downconversion.enable": "false",
    "message.format.version": "2.8", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.type": "CreateTime", "min.cleanable.dirty.ratio": "0.3", "min.compaction.lag.ms": "10",
    "min.insync.replicas": "1", "preallocate": "true", "remote.storage.enable": "false",
    "retention.bytes": "1000000", "retention.ms": "100000", "segment.bytes": "1000000",
    "segment.index.bytes": "100000", "segment.jitter.ms": "10", "segment.ms": "100000",
    "unclean.leader.election.enable": "true",
}


def test_every_kafka_topic_config_is_accepted_and_reported(bootstrap, admin):
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    created = confluent.create_topics([ConfluentTopic("all-configs", 1, config=KAFKA_TOPIC_CONFIGS)])
    created["all-configs"].result(30)
    resource = ConfigResource("topic", "all-configs")
    described = confluent.describe_configs([resource])[resource].result(30)
    assert {name: described[name].value for name in KAFKA_TOPIC_CONFIGS} == KAFKA_TOPIC_CONFIGS
    confluent.create_topics([ConfluentTopic("no-configs", 1)])["no-configs"].result(30)
    fresh = confluent.describe_configs([ConfigResource("topic", "no-configs")])
    defaults = fresh[ConfigResource("topic", "no-configs")].result(30)
    assert set(KAFKA_TOPIC_CONFIGS) <= set(defaults)
    assert defaults["compression.type"].value == "producer" and defaults["min.insync.replicas"].value == "1"
    refused = confluent.create_topics([ConfluentTopic("bad-codec", 1, config={"compression.type": "brotli"})])
    with pytest.raises(KafkaException) as error:
        refused["bad-codec"].result(30)
    assert error.value.args[0].code() == ErrorCode.INVALID_CONFIG


@pytest.mark.parametrize("topic_codec, producer_codec, stored", [
    ("zstd", "none", Compression.ZSTD), ("uncompressed", "gzip", Compression.NONE),
    ("snappy", "lz4", Compression.SNAPPY), ("producer", "gzip", Compression.GZIP)])
def test_compression_type_recompresses_on_the_broker(bootstrap, topic_codec, producer_codec, stored):
    topic = f"codec-{topic_codec}"
    confluent = AdminClient({"bootstrap.servers": bootstrap})
    confluent.create_topics([ConfluentTopic(topic, 1, config={"compression.type": topic_codec})])[topic].result(30)
    sent = [(b"k%d" % i, b"value-%d" % i * 20) for i in range(50)]
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": producer_codec, "linger.ms": 50})
    for key, value in sent:
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(30) == 0
    data = fetch(Wire(bootstrap), topic, 0, 0).records
    headers = [h for _, h in iter_batches(data)]
    assert headers and {h.compression for h in headers} == {stored}
    got = [(r.key, r.value) for pos, _ in iter_batches(data) for r in decode_records(data, pos)[1]]
    assert got == sent


def test_timestamps_outside_the_topic_bounds_are_refused(admin, bootstrap):
    admin.create_topics([NewTopic("recent-only", 1, 1, topic_configs={
        "message.timestamp.before.max.ms": "3600000", "message.timestamp.after.max.ms": "60000"})])
    # without idempotence: kafka-python's idempotent producer stops at its first failed batch
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0, enable_idempotence=False)
    now = int(time.time() * 1000)
    for timestamp in (now - 2 * 3600_000, now + 3600_000):  # one batch each: each record's own error
        with pytest.raises(kafka_errors.InvalidTimestampError):
            producer.send("recent-only", b"out of bounds", timestamp_ms=timestamp).get(30)
    assert producer.send("recent-only", b"now", timestamp_ms=now).get(30).offset == 0
    admin.create_topics([NewTopic("recent-only-old-style", 1, 1, topic_configs={
        "message.timestamp.difference.max.ms": "3600000"})])  # Kafka's deprecated form: both bounds
    for timestamp in (now - 2 * 3600_000, now + 2 * 3600_000):
        with pytest.raises(kafka_errors.InvalidTimestampError):
            producer.send("recent-only-old-style", b"out of bounds", timestamp_ms=timestamp).get(30)
    producer.close()


def test_describe_producers(bootstrap, admin):
    admin.create_topics([NewTopic("produced", 1, 1)])
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=0)
    stamps = [1_700_000_000_000 + i for i in range(3)]
    for ts in stamps:
        producer.send("produced", b"v", partition=0, timestamp_ms=ts).get(30)
    producer.close()
    tp = TopicPartition("produced", 0)
    (state,) = admin.describe_producers([tp])[tp].active_producers
    assert state.producer_id >= 0 and state.producer_epoch == 0
    assert (state.last_sequence, state.last_timestamp) == (len(stamps) - 1, stamps[-1])
