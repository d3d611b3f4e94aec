"""The gaps real clients hit (issue 11), each shown at the wire and with the client that tripped on it."""
import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import NewTopic as ConfluentTopic
from kafka import KafkaAdminClient, KafkaProducer
from kafka import errors as kafka_errors
from kafka.admin import NewTopic
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.admin import DescribeGroupsRequest
from kafka.protocol.metadata import FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from headwater import records
from headwater.broker.security.acl_operations import AclOperation
from headwater.protocol.errors import ErrorCode
from headwater.testing import BrokerProcess

from tests.broker.test_bad_input import produce
from tests.support.wire import Wire


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory):
    """One broker for the module: every test uses its own topics."""
    proc = BrokerProcess(tmp_path_factory.mktemp("gaps") / "data", "--num-partitions", "3").start()
    yield proc
    proc.stop()


# --- Fetch honours max_bytes and partition_max_bytes (KIP-74) -------------------------------

def _fetch_all(wire, topic, partitions, max_bytes, partition_max_bytes):
    F = FetchRequest[11]
    request = F(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[
                    F.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=0,
                                                log_start_offset=-1, partition_max_bytes=partition_max_bytes)
                    for p in partitions])], forgotten_topics_data=[], rack_id="")
    return [bytes(p.records or b"") for p in wire.request(request, 11).responses[0].partitions]


def _expected(batches, max_bytes, partition_max_bytes):
    """Kafka's rule in plain Python: whole batches within both limits; only the first batch of
    the first non-empty partition may exceed them."""
    out, budget = [], max_bytes
    for partition in batches:
        taken, room = b"", min(budget, partition_max_bytes)
        for batch in partition:
            first_of_response = not taken and budget == max_bytes
            if len(taken) + len(batch) > room and not first_of_response:
                break
            taken += batch
        out.append(taken)
        budget -= len(taken)
    return out


def test_fetch_stays_within_max_bytes_and_partition_max_bytes(shared_broker):
    wire = Wire(shared_broker.bootstrap)
    big = lambda tag: records.encode_batch([records.Record(0, 1, tag, bytes(600_000))])  # noqa: E731
    small = records.encode_batch([records.Record(0, 1, b"s", b"small")])
    batches = [[big(b"p0"), small], [big(b"p1")], [small, small]]
    for partition, partition_batches in enumerate(batches):
        for batch in partition_batches:
            assert produce(wire, "kip74", partition, batch).error_code == 0
    for max_bytes, partition_max_bytes in ((1_000_000, 1_000_000), (1_000_000, 100_000), (10, 10)):
        answer = _fetch_all(wire, "kip74", [0, 1, 2], max_bytes, partition_max_bytes)
        expected = _expected(batches, max_bytes, partition_max_bytes)
        assert [len(a) for a in answer] == [len(e) for e in expected], (max_bytes, partition_max_bytes)
        assert [records.decode_records(a)[1] if a else [] for a in answer] == \
            [records.decode_records(e)[1] if e else [] for e in expected]
        assert sum(map(len, answer)) <= max(max_bytes, len(batches[0][0]))


def test_librdkafka_consumes_partitions_fuller_than_its_fetch_limit(shared_broker):
    """Before KIP-74 was honoured, librdkafka refused each over-long response and retried forever."""
    sent = {p: [b"%d-%d-" % (p, i) + bytes(100_000) for i in range(9)] for p in (0, 1)}
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "linger.ms": 200, "batch.size": 1_000_000})
    for p, values in sent.items():
        for value in values:
            producer.produce("full-partitions", partition=p, value=value)
    assert producer.flush(60) == 0
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "kip74",
                         "fetch.max.bytes": 1_000_000, "receive.message.max.bytes": 1_000_512,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition("full-partitions", p, 0) for p in sent])
    got = {0: [], 1: []}
    for _ in range(60):
        for msg in consumer.consume(100, timeout=1):
            assert msg.error() is None, msg.error()
            got[msg.partition()].append(msg.value())
        if sum(map(len, got.values())) == 18:
            break
    consumer.close()
    assert got == sent


# --- Produce v8 names the invalid records (KIP-467) -----------------------------------------

def _create_compacted(bootstrap, topic):
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
    admin.close()


KEYS = [b"a", None, b"b", None]  # records 1 and 3 are invalid on a compacted topic


def test_produce_v8_names_each_keyless_record_on_a_compacted_topic(shared_broker):
    _create_compacted(shared_broker.bootstrap, "kip467-wire")
    batch = records.encode_batch([records.Record(i, 1, key, b"v") for i, key in enumerate(KEYS)])
    P = ProduceRequest[8]
    request = P(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name="kip467-wire", partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])])
    answer = Wire(shared_broker.bootstrap).request(request, 8).responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.INVALID_RECORD
    expected = [i for i, key in enumerate(KEYS) if key is None]
    assert [e.batch_index for e in answer.record_errors] == expected
    assert all("without a key" in e.batch_index_error_message for e in answer.record_errors)


def test_kafka_python_fails_only_the_keyless_records(shared_broker):
    _create_compacted(shared_broker.bootstrap, "kip467")
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, linger_ms=200)
    futures = [producer.send("kip467", key=key, value=b"v", partition=0) for key in KEYS]
    producer.flush(30)
    producer.close()
    errors = [f.exception for f in futures]
    assert all(e is not None for e in errors)  # the batch is refused whole, as in Kafka
    invalid = [i for i, e in enumerate(errors) if isinstance(e, kafka_errors.InvalidRecordError)]
    assert invalid == [i for i, key in enumerate(KEYS) if key is None]
    assert all("without a key" in str(errors[i]) for i in invalid)


# --- FindCoordinator for a transactional id: the broker itself (issue 13) -----------------

def test_find_coordinator_for_a_transactional_id_is_this_broker(shared_broker):
    R = FindCoordinatorRequest[1]
    answer = Wire(shared_broker.bootstrap).request(R(key="txn-1", key_type=1), 1)
    host, port = shared_broker.bootstrap.rsplit(":", 1)
    assert (answer.error_code, answer.host, answer.port) == (0, host, int(port))


def test_transactional_producers_of_every_client_initialise(shared_broker):
    producer = Producer({"bootstrap.servers": shared_broker.bootstrap, "transactional.id": "txn-confluent"})
    producer.init_transactions(30)
    producer = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id="txn-kafka-python",
                             max_block_ms=30_000)
    producer.init_transactions()
    producer.close(0)

    async def aiokafka_start():
        producer = AIOKafkaProducer(bootstrap_servers=shared_broker.bootstrap, transactional_id="txn-aiokafka")
        try:
            await asyncio.wait_for(producer.start(), 30)
        finally:
            await producer.stop()
    asyncio.run(aiokafka_start())


# --- Authorized operations (KIP-430): no authorizer grants everything ------------------------

TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}
GROUP_OPERATIONS = {"READ", "DESCRIBE", "DELETE"}
CLUSTER_OPERATIONS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER",
                      "DESCRIBE"}


def _bits(names):
    return {AclOperation[name] for name in names}


def test_authorized_operations_at_the_wire(shared_broker):
    wire = Wire(shared_broker.bootstrap)
    M = MetadataRequest[8]
    asked = wire.request(M(topics=[M.MetadataRequestTopic(name="kip430")], allow_auto_topic_creation=True,
                           include_cluster_authorized_operations=True, include_topic_authorized_operations=True), 8)
    assert asked.authorized_operations == _bits(CLUSTER_OPERATIONS)
    assert asked.topics[0].authorized_operations == _bits(TOPIC_OPERATIONS)
    not_asked = wire.request(M(topics=None, allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                               include_topic_authorized_operations=False), 8)
    assert not_asked.authorized_operations is None  # Kafka's INT32_MIN
    D = DescribeGroupsRequest[5]
    group = wire.request(D(groups=["nobody"], include_authorized_operations=True), 5).groups[0]
    assert group.authorized_operations == _bits(GROUP_OPERATIONS)


def test_confluent_admin_reports_authorized_operations(shared_broker):
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    admin.create_topics([ConfluentTopic("kip430-admin", 1)])["kip430-admin"].result(30)
    names = lambda ops: {op.name for op in ops or []}  # noqa: E731
    topics = admin.describe_topics(TopicCollection(["kip430-admin"]), include_authorized_operations=True)
    assert names(topics["kip430-admin"].result(30).authorized_operations) == TOPIC_OPERATIONS
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert names(cluster.authorized_operations) == CLUSTER_OPERATIONS
    consumer = Consumer({"bootstrap.servers": shared_broker.bootstrap, "group.id": "kip430-group"})
    consumer.subscribe(["kip430-admin"])
    consumer.poll(5)
    group = admin.describe_consumer_groups(["kip430-group"], include_authorized_operations=True)["kip430-group"]
    assert names(group.result(30).authorized_operations) == GROUP_OPERATIONS
    consumer.close()
