"""Kafka's Java `Admin` client (4.4) against a Headwater broker: jvm/.../AdminTour calls every
`Admin` method once, and each of its answers is compared here with what the module set up and
what confluent-kafka (or `headwater quotas`) reads back. Methods whose API Headwater does not
serve are asserted to fail the way Kafka's client reports it."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (AclBindingFilter, AclOperation, AclPermissionType, AlterConfigOpType,
                                   ConfigEntry, ConfigResource, ResourcePatternType, ResourceType)

from headwater.testing import BrokerProcess, run_java

from tests.support.clients import require_kafka_jars
from tests.support.groups import admin, committed, create_topic, holding_every_partition

TOPIC, PARTITIONS = "tour-data", 3
PREFIX = "tour"
NAMES = {"topic": TOPIC, "classic": "tour-classic", "consumer": "tour-consumer", "static.group": "tour-static",
         "static.instance": "tour-static-1", "doomed": "tour-doomed", "share": "tour-share", "txn": "tour-txn",
         "prefix": PREFIX}
PER_PARTITION = 10          # plain records produced to each partition
TXN_PARTITION, TXN_RECORDS = 1, 4
UNSUPPORTED = "org.apache.kafka.common.errors.UnsupportedVersionException"


@dataclass
class Tour:
    bootstrap: str
    lines: dict[str, dict]           # method -> its line
    produced: list[tuple]            # (partition, offset, timestamp) of every record in the data topic
    before_topics: set[str]          # the topics confluent-kafka listed before the tour
    consumer_assignment: set[int]    # the KIP-848 member's partitions as confluent-kafka has them
    consumer_member_id: str
    txn_offsets: list[int]           # the open transaction's records in TXN_PARTITION
    commit_after_fence: str          # what committing the open transaction answered after fenceProducers

    def ok(self, method: str):
        line = self.lines[method]
        assert line["ok"], line
        return line["result"]

    def error(self, method: str) -> str:
        line = self.lines[method]
        assert not line["ok"], line
        return line["error"]


def _commit(bootstrap, group, offsets: dict[int, int]) -> None:
    """Offsets committed without joining the group (a simple consumer)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _produce(producer: Producer, partition: int, count: int) -> list[int]:
    offsets = []
    for i in range(count):
        producer.produce(TOPIC, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=partition,
                         on_delivery=lambda err, msg: offsets.append(msg.offset()) if not err else None)
    assert producer.flush(60) == 0
    assert len(offsets) == count
    return offsets


def _read_all(bootstrap) -> list[tuple]:
    """(partition, offset, timestamp) of every record, open transactions' included."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "isolation.level": "read_uncommitted",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = []
    expected = PARTITIONS * PER_PARTITION + TXN_RECORDS
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        for msg in consumer.consume(100, 1.0):
            assert not msg.error(), msg.error()
            got.append((msg.partition(), msg.offset(), msg.timestamp()[1]))
    consumer.close()
    assert len(got) == expected
    return got


@pytest.fixture(scope="module")
def tour(tmp_path_factory):
    require_kafka_jars()
    with BrokerProcess(tmp_path_factory.mktemp("kafka-admin") / "data") as broker:
        bootstrap = broker.bootstrap
        create_topic(bootstrap, TOPIC, PARTITIONS)
        plain = Producer({"bootstrap.servers": bootstrap})
        for p in range(PARTITIONS):
            _produce(plain, p, PER_PARTITION)
        _commit(bootstrap, NAMES["classic"], {p: 1 + p for p in range(PARTITIONS)})
        _commit(bootstrap, NAMES["doomed"], {0: 1})

        # a share group that read a few records (Java's KafkaShareConsumer), from the earliest offset
        client = admin(bootstrap)
        share = ConfigResource(ResourceType.GROUP, NAMES["share"], incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        client.incremental_alter_configs([share])[share].result(30)
        done = run_java("headwater.jvm.ShareRead", bootstrap, TOPIC, NAMES["share"], "3", "implicit")
        assert done.exit_code == 0, done.stderr

        txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": NAMES["txn"]})
        txn.init_transactions(30)
        txn.begin_transaction()
        txn_offsets = _produce(txn, TXN_PARTITION, TXN_RECORDS)

        consumer = holding_every_partition(bootstrap, NAMES["consumer"], TOPIC, PARTITIONS,
                                           **{"group.protocol": "consumer"})
        static = holding_every_partition(bootstrap, NAMES["static.group"], TOPIC, PARTITIONS,
                                         **{"group.instance.id": NAMES["static.instance"]})
        try:
            before = {t for t in admin(bootstrap).list_topics(timeout=10).topics}
            produced = _read_all(bootstrap)   # before deleteRecords
            done = run_java("headwater.jvm.AdminTour", bootstrap, *(f"{k}={v}" for k, v in NAMES.items()), timeout=300)
            assert done.exit_code == 0, done.stderr[-3000:]
            lines = {line["method"]: line for line in map(json.loads, done.stdout.splitlines())}
            try:
                txn.commit_transaction(30)
                after_fence = "committed"
            except KafkaException as exc:
                after_fence = exc.args[0].name()
            yield Tour(bootstrap, lines, produced, before,
                       {tp.partition for tp in consumer.assignment()}, consumer.memberid(), txn_offsets,
                       after_fence)
        finally:
            consumer.close()
            static.close()


CREATED, DELETED = f"{PREFIX}-created", f"{PREFIX}-deleted"
SERVED = ["describeCluster", "describeFeatures", "createTopics", "createTopics(validateOnly)", "listTopics",
          "describeTopics", "createPartitions",
          "describeConfigs", "incrementalAlterConfigs", "deleteRecords", "listOffsets", "describeLogDirs",
          "describeReplicaLogDirs", "listGroups", "listConsumerGroups", "describeConsumerGroups",
          "describeClassicGroups", "listConsumerGroupOffsets", "alterConsumerGroupOffsets",
          "deleteConsumerGroupOffsets", "removeMembersFromConsumerGroup", "deleteConsumerGroups",
          "describeShareGroups", "deleteShareGroups", "createAcls", "describeAcls", "deleteAcls",
          "alterUserScramCredentials", "describeUserScramCredentials", "alterClientQuotas", "describeClientQuotas",
          "describeProducers", "listTransactions", "describeTransactions", "abortTransaction", "fenceProducers",
          "forceTerminateTransaction", "deleteTopics"]
# The API each of these needs is not served (one broker without KRaft, no delegation tokens, no
# Streams groups): Kafka's client says so without sending anything.
NOT_SERVED = {"electLeaders": "ELECT_LEADERS",
              "alterPartitionReassignments": "ALTER_PARTITION_REASSIGNMENTS",
              "listPartitionReassignments": "LIST_PARTITION_REASSIGNMENTS",
              "alterReplicaLogDirs": "ALTER_REPLICA_LOG_DIRS", "describeMetadataQuorum": "DESCRIBE_QUORUM",
              "listConfigResources": "LIST_CONFIG_RESOURCES", "updateFeatures": "UPDATE_FEATURES",
              "unregisterBroker": "UNREGISTER_BROKER", "createDelegationToken": "CREATE_DELEGATION_TOKEN",
              "describeDelegationToken": "DESCRIBE_DELEGATION_TOKEN", "describeStreamsGroups": "STREAMS_GROUP_DESCRIBE"}
# Served, but refused for what Headwater does not keep (the INVALID_REQUEST Headwater answers)
REFUSED = {"incrementalAlterConfigs(client-metrics)": "configs of resource type 16 cannot be changed",
           "alterClientQuotas(user)": "only client-id quotas are supported"}


def test_every_method_answered(tour):
    assert sorted(tour.lines) == sorted([*SERVED, *NOT_SERVED, *REFUSED])
    for method in SERVED:
        tour.ok(method)
    for method, api in NOT_SERVED.items():
        assert tour.error(method) == f"{UNSUPPORTED}: The node does not support {api}"
    for method, message in REFUSED.items():
        assert tour.error(method).startswith("org.apache.kafka.common.errors.InvalidRequestException: " + message)


def test_cluster_and_topics(tour):
    client = admin(tour.bootstrap)
    cluster = client.describe_cluster().result(30)
    assert tour.ok("describeCluster") == {"clusterId": cluster.cluster_id, "controller": cluster.controller.id,
                                          "nodes": [n.id for n in cluster.nodes]}
    # Headwater finalizes no feature versions (no KRaft metadata.version, group.version...)
    assert tour.ok("describeFeatures") == {"finalized": {}, "supported": {}}
    internal = {t for t in tour.before_topics if t.startswith("__")}
    assert tour.ok("listTopics") == sorted((tour.before_topics - internal) | {CREATED, DELETED})
    # validateOnly: the partitions and configs the topic would have, and no topic
    assert tour.ok("createTopics(validateOnly)") == {
        f"{PREFIX}-validated": {"partitions": 5, "cleanup.policy": "compact"}}
    after = client.list_topics(timeout=10).topics
    assert f"{PREFIX}-validated" not in after
    assert len(after[CREATED].partitions) == 4 and DELETED not in after   # createPartitions, deleteTopics
    # Java prints topic ids in URL-safe base64, confluent-kafka in the standard alphabet
    ids = {name: str(future.result(30).topic_id).replace("+", "-").replace("/", "_")
           for name, future in client.describe_topics(TopicCollection([TOPIC, CREATED])).items()}
    assert tour.ok("createTopics") == {CREATED: {"partitions": 2, "topicId": ids[CREATED], "retention.ms": "3600000"},
                                       DELETED: {"partitions": 1}}
    described = tour.ok("describeTopics")
    assert described == {TOPIC: {"partitions": PARTITIONS, "topicId": ids[TOPIC], "leaders": [0] * PARTITIONS},
                         CREATED: {"partitions": 2, "topicId": ids[CREATED], "leaders": [0, 0]}}
    assert described[TOPIC]["topicId"] != "AAAAAAAAAAAAAAAAAAAAAA"


def _configs(client, resource) -> dict[str, str]:
    return {k: v.value for k, v in client.describe_configs([resource])[resource].result(30).items()}


def test_configs(tour):
    client = admin(tour.bootstrap)
    broker = _configs(client, ConfigResource(ResourceType.BROKER, "0"))
    assert tour.ok("describeConfigs") == {"topic": {"retention.ms": "3600000", "source": "DYNAMIC_TOPIC_CONFIG"},
                                          "broker": len(broker), "group": "earliest"}
    assert tour.ok("incrementalAlterConfigs") == {f"TOPIC:{CREATED}": "altered", "BROKER:0": "altered",
                                                  f"GROUP:{NAMES['share']}": "altered"}
    topic = _configs(client, ConfigResource(ResourceType.TOPIC, CREATED))
    assert (topic["retention.ms"], topic["cleanup.policy"]) == ("7200000", "compact")
    assert broker["log.retention.ms"] == "86400000"


def test_records_and_offsets(tour):
    ends = {p: max(o for q, o, _ in tour.produced if q == p) + 1 for p in range(PARTITIONS)}
    starts = {0: 2, 1: 0, 2: 0}   # deleteRecords moved partition 0's start to 2
    assert tour.ok("deleteRecords") == {f"{TOPIC}-0": 2}
    consumer = Consumer({"bootstrap.servers": tour.bootstrap, "group.id": "unused",
                         "isolation.level": "read_uncommitted"})
    try:
        assert {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)[0]
                for p in range(PARTITIONS)} == starts
    finally:
        consumer.close()
    newest = {}   # the first record with the largest timestamp, from the log start on
    for p, offset, ts in sorted(tour.produced):
        if offset >= starts[p] and (p not in newest or ts > newest[p][1]):
            newest[p] = (offset, ts)
    assert tour.ok("listOffsets") == {"earliest": {str(p): o for p, o in starts.items()},
                                      "latest": {str(p): o for p, o in ends.items()},
                                      "maxTimestamp": {str(p): o for p, (o, _) in newest.items()}}
    sizes = tour.ok("describeLogDirs")
    assert sorted(sizes) == [f"{TOPIC}-{p}" for p in range(PARTITIONS)] and all(v > 0 for v in sizes.values())
    assert tour.ok("describeReplicaLogDirs")["currentReplicaLogDir"].endswith("/data")


def test_groups(tour):
    client = admin(tour.bootstrap)   # kept until its futures are done
    listed = {g.group_id: g.type for g in client.list_consumer_groups().result(30).valid}
    assert listed.get(NAMES["doomed"]) is None   # deleteConsumerGroups
    # confluent-kafka listed the groups the same way (the doomed one before it was deleted)
    types = {NAMES["classic"]: "Classic", NAMES["consumer"]: "Consumer", NAMES["static.group"]: "Classic",
             NAMES["doomed"]: "Classic", NAMES["share"]: "Share"}
    assert {g: v["type"] for g, v in tour.ok("listGroups").items()} == types
    assert {g: v["type"] for g, v in tour.ok("listConsumerGroups").items()} == {
        g: t for g, t in types.items() if t != "Share"}
    assert {g: t.name.title() for g, t in listed.items() if g in types} == {
        g: t for g, t in types.items() if g not in (NAMES["doomed"], NAMES["share"])}

    every = [f"{TOPIC}-{p}" for p in range(PARTITIONS)]
    described = tour.ok("describeConsumerGroups")
    consumer = described[NAMES["consumer"]]
    assert (consumer["type"], consumer["state"], consumer["assignor"]) == ("Consumer", "Stable", "uniform")
    assert [(m["memberId"], m["assignment"], m["targetAssignment"]) for m in consumer["members"]] == [
        (tour.consumer_member_id, [f"{TOPIC}-{p}" for p in sorted(tour.consumer_assignment)], every)]
    assert consumer["members"][0]["memberEpoch"] == consumer["groupEpoch"] == consumer["targetAssignmentEpoch"]
    static = described[NAMES["static.group"]]
    assert (static["type"], static["state"]) == ("Classic", "Stable")
    assert [(m["instanceId"], m["assignment"]) for m in static["members"]] == [(NAMES["static.instance"], every)]
    assert described[NAMES["classic"]]["state"] == "Empty" and not described[NAMES["classic"]]["members"]
    classic = tour.ok("describeClassicGroups")
    assert (classic["state"], classic["protocol"], classic["protocolData"]) == ("Stable", "consumer", "range")
    assert classic["members"] == static["members"]

    assert tour.ok("listConsumerGroupOffsets") == {f"{TOPIC}-{p}": 1 + p for p in range(PARTITIONS)}
    assert tour.ok("alterConsumerGroupOffsets") == {f"{TOPIC}-{p}": 3 + p for p in range(PARTITIONS)}
    assert tour.ok("deleteConsumerGroupOffsets") == [f"{TOPIC}-2"]
    assert committed(tour.bootstrap, NAMES["classic"], TOPIC, range(PARTITIONS)) == {0: 3, 1: 4, 2: -1001}
    assert tour.ok("removeMembersFromConsumerGroup") == [NAMES["static.instance"]]

    # the share group read 3 records with Java's share consumer, which then left
    assert tour.ok("describeShareGroups") == {"state": "Empty", "members": 0, "groupEpoch": 2}
    assert tour.ok("deleteShareGroups") == [NAMES["share"]]


def test_acls_users_quotas(tour):
    client = admin(tour.bootstrap)
    binding = {"principal": f"User:{PREFIX}-reader", "host": "*", "operation": "READ", "permission": "ALLOW"}
    on_topic = {"resourceType": "TOPIC", "name": f"{PREFIX}-guarded", "patternType": "LITERAL", **binding}
    on_groups = {"resourceType": "GROUP", "name": f"{PREFIX}-guarded-", "patternType": "PREFIXED", **binding}
    assert tour.ok("createAcls") == tour.ok("describeAcls") == [on_groups, on_topic]
    assert tour.ok("deleteAcls") == [on_groups]
    any_acl = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                               AclPermissionType.ANY)
    left = client.describe_acls(any_acl).result(30)
    assert [(a.restype_int, a.name, a.principal, a.operation.name) for a in left] == [
        (ResourceType.TOPIC.value, f"{PREFIX}-guarded", f"User:{PREFIX}-reader", "READ")]

    user = f"{PREFIX}-user"
    assert tour.ok("describeUserScramCredentials") == {user: [{"mechanism": "SCRAM_SHA_256", "iterations": 4096}]}
    info = client.describe_user_scram_credentials([user])[user].result(30).scram_credential_infos
    assert [(i.mechanism.name, i.iterations) for i in info] == [("SCRAM_SHA_256", 4096)]

    quotas = {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 2048.0}
    assert tour.ok("alterClientQuotas") == {f"{PREFIX}-client": quotas}
    assert tour.ok("describeClientQuotas") == {f"{{client-id={PREFIX}-client}}": quotas}
    done = subprocess.run([sys.executable, "-m", "headwater", "quotas", "describe", "--bootstrap-server",
                           tour.bootstrap, "--json"], capture_output=True, text=True, check=True)
    rows = {r["client_id"]: r for r in json.loads(done.stdout)}
    assert (rows[f"{PREFIX}-client"]["producer_byte_rate"], rows[f"{PREFIX}-client"]["consumer_byte_rate"]) == (
        1048576, 2048)


def test_producers_and_transactions(tour):
    producers = tour.ok("describeProducers")
    assert producers[str(TXN_PARTITION)] == [{
        "producerId": producers[str(TXN_PARTITION)][0]["producerId"], "producerEpoch": 0,
        "lastSequence": TXN_RECORDS - 1, "currentTransactionStartOffset": tour.txn_offsets[0]}]
    producer_id = producers[str(TXN_PARTITION)][0]["producerId"]
    assert all(producers[str(p)] == [] for p in range(PARTITIONS) if p != TXN_PARTITION)  # not idempotent
    assert tour.ok("listTransactions") == {NAMES["txn"]: {"producerId": producer_id, "state": "Ongoing"}}
    described = tour.ok("describeTransactions")
    assert (described["state"], described["producerId"], described["topicPartitions"]) == (
        "Ongoing", producer_id, [f"{TOPIC}-{TXN_PARTITION}"])
    # fenceProducers bumped the epoch: the open transaction's producer is fenced
    assert tour.ok("fenceProducers") == [NAMES["txn"]]
    assert tour.commit_after_fence == "_FENCED"
