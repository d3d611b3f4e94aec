"""Apache Kafka's own command-line tools and Java clients (4.4, from Maven Central by `make jvm`)
against a Headwater broker: each tool's output is compared with what confluent-kafka sees."""
from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource

from headwater.testing import BrokerProcess, KafkaTools

from tests.support.clients import confluent_consume, confluent_produce, require_kafka_jars, stable_end
from tests.support.groups import admin, create_topic


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("kafka-tools") / "data", "--num-partitions", "3") as proc:
        yield proc


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    """One JVM for the module's tools (its stray output in tools.log)."""
    require_kafka_jars()
    with KafkaTools(tmp_path_factory.mktemp("kafka-tools-jvm") / "tools.log") as launcher:
        yield launcher


@dataclasses.dataclass
class SecuredBroker:
    """A broker's SASL_SSL listener: the tools' --command-config file, librdkafka's settings."""
    bootstrap: str
    command_config: Path
    client_config: dict


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A broker with one SASL_SSL listener (SCRAM-SHA-512); alice is a super user."""
    base = tmp_path_factory.mktemp("kafka-tools-secured")
    certs, data = base / "certs", base / "data"
    for command in (["certs", "--out", str(certs)],
                    ["users", "create", "--offline", "--data-dir", str(data), "alice", "--password", "alice-pw",
                     "--iterations", "4096"]):
        subprocess.run([sys.executable, "-m", "headwater", *command], check=True, capture_output=True)
    with BrokerProcess(data, "--listener", "SASL_SSL://127.0.0.1:0", "--ssl-certfile", str(certs / "broker.pem"),
                       "--ssl-keyfile", str(certs / "broker.key"), "--ssl-cafile", str(certs / "ca.pem"),
                       "--super-user", "User:alice") as proc:
        command_config = base / "client.properties"
        command_config.write_text(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            'sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="alice" password="alice-pw";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.pem'}\n")
        bootstrap = f"127.0.0.1:{proc.listeners['SASL_SSL']}"
        yield SecuredBroker(bootstrap, command_config, {
            "bootstrap.servers": bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": str(certs / "ca.pem"),
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-pw"})


def run(tools, broker, tool, *args, input=""):
    """The tool's stdout, once it exited 0 (over SASL_SSL for a SecuredBroker)."""
    security = ("--command-config", str(broker.command_config)) if isinstance(broker, SecuredBroker) else ()
    done = tools.run(tool, "--bootstrap-server", broker.bootstrap, *security, *args, input=input)
    assert done.exit_code == 0, f"{tool} {args} exited {done.exit_code}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def partitions_of(broker, topic) -> int:
    return len(admin(broker.bootstrap).list_topics(topic, timeout=10).topics[topic].partitions)


def watermarks(broker, topic, partitions) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10) for p in range(partitions)}
    finally:
        consumer.close()


def committed(broker, group, topic, partitions) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def produce(broker, topic, count) -> list[tuple]:
    """`count` keyed records; their (partition, offset, key, value, headers) as delivered."""
    return confluent_produce(broker.bootstrap, topic, [(f"k{i % 7}".encode(), f"v{i}".encode(), [])
                                                       for i in range(count)])


def describe_table(stdout: str) -> dict[int, dict[str, str]]:
    """kafka-topics --describe's partition lines: partition -> {field: value}."""
    table = {}
    for line in stdout.splitlines():
        if line.startswith("\tTopic:"):
            fields = dict(re.findall(r"(\w+): ?([^\t]*)", line))
            table[int(fields["Partition"])] = fields
    return table


def test_topics_create_describe_alter_delete(tools, broker):
    assert "Created topic tools-topic." in run(tools, broker, "kafka-topics", "--create", "--topic", "tools-topic",
                                               "--partitions", "2", "--config", "retention.ms=3600000")
    described = run(tools, broker, "kafka-topics", "--describe", "--topic", "tools-topic")
    assert "PartitionCount: 2" in described and "retention.ms=3600000" in described
    assert {p: (row["Leader"], row["Replicas"], row["Isr"]) for p, row in describe_table(described).items()} \
        == {p: ("0", "0", "0") for p in range(partitions_of(broker, "tools-topic"))}

    run(tools, broker, "kafka-topics", "--alter", "--topic", "tools-topic", "--partitions", "5")
    assert partitions_of(broker, "tools-topic") == 5
    assert sorted(describe_table(run(tools, broker, "kafka-topics", "--describe", "--topic", "tools-topic"))) \
        == list(range(5))

    run(tools, broker, "kafka-topics", "--delete", "--topic", "tools-topic")
    assert "tools-topic" not in admin(broker.bootstrap).list_topics(timeout=10).topics
    assert "tools-topic" not in run(tools, broker, "kafka-topics", "--list").split()


def test_console_producer_then_consumer(tools, broker):
    create_topic(broker.bootstrap, "console", 3)
    lines = [f"key-{i % 5}:value {i}" for i in range(40)]
    run(tools, broker, "kafka-console-producer", "--topic", "console", "--reader-property", "parse.key=true",
        "--reader-property", "key.separator=:", input="\n".join(lines) + "\n")
    written = confluent_consume(broker.bootstrap, "console", range(3), len(lines))
    assert sorted(f"{key.decode()}:{value.decode()}" for _, _, key, value, _ in written) == sorted(lines)

    out = run(tools, broker, "kafka-console-consumer", "--topic", "console", "--from-beginning",
              "--max-messages", str(len(lines)), "--formatter-property", "print.key=true",
              "--formatter-property", "print.partition=true", "--formatter-property", "key.separator=:",
              "--timeout-ms", "30000")
    # key.separator is also the formatter's separator between the partition and the key
    assert sorted(out.splitlines()) \
        == sorted(f"Partition:{p}:{key.decode()}:{value.decode()}" for p, _, key, value, _ in written)


def test_consumer_groups_describe_and_reset(tools, broker):
    create_topic(broker.bootstrap, "grouped", 3)
    produce(broker, "grouped", 60)
    ends = {p: high for p, (_, high) in watermarks(broker, "grouped", 3).items()}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tools-group"})
    positions = {p: end // 2 for p, end in ends.items()}
    consumer.commit(offsets=[TopicPartition("grouped", p, o) for p, o in positions.items()], asynchronous=False)
    consumer.close()

    out = run(tools, broker, "kafka-consumer-groups", "--describe", "--group", "tools-group")
    rows = [line.split() for line in out.splitlines() if line.startswith("tools-group ")]
    assert {int(r[2]): (int(r[3]), int(r[4]), int(r[5])) for r in rows} \
        == {p: (positions[p], ends[p], ends[p] - positions[p]) for p in range(3)}

    out = run(tools, broker, "kafka-consumer-groups", "--reset-offsets", "--group", "tools-group", "--topic",
              "grouped", "--to-earliest", "--execute")
    assert committed(broker, "tools-group", "grouped", 3) == {p: 0 for p in range(3)}
    assert {int(r[2]): int(r[3]) for r in (line.split() for line in out.splitlines())
            if r[:2] == ["tools-group", "grouped"]} == {p: 0 for p in range(3)}


def test_get_offsets_and_delete_records(tools, broker, tmp_path):
    create_topic(broker.bootstrap, "trimmed", 2)
    produce(broker, "trimmed", 30)
    ends = {p: high for p, (_, high) in watermarks(broker, "trimmed", 2).items()}

    def offsets(time):
        out = run(tools, broker, "kafka-get-offsets", "--topic", "trimmed", "--time", time)
        return {int(p): int(o) for _, p, o in (line.split(":") for line in out.splitlines())}
    assert offsets("-1") == ends
    assert offsets("-2") == {0: 0, 1: 0}

    cut = {0: ends[0] // 3, 1: ends[1]}
    plan = tmp_path / "offsets.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [{"topic": "trimmed", "partition": p, "offset": o}
                                                             for p, o in cut.items()]}))
    out = run(tools, broker, "kafka-delete-records", "--offset-json-file", str(plan))
    assert f"partition: trimmed-0\tlow_watermark: {cut[0]}" in out
    assert {p: low for p, (low, _) in watermarks(broker, "trimmed", 2).items()} == cut
    assert offsets("-2") == cut


def test_configs_describe_and_alter(tools, broker):
    create_topic(broker.bootstrap, "configured", 1)
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", "configured",
        "--add-config", "retention.ms=7200000,cleanup.policy=compact")
    resource, client = ConfigResource("topic", "configured"), admin(broker.bootstrap)
    truth = client.describe_configs([resource])[resource].result(30)
    assert (truth["retention.ms"].value, truth["cleanup.policy"].value) == ("7200000", "compact")
    out = run(tools, broker, "kafka-configs", "--describe", "--entity-type", "topics", "--entity-name", "configured")
    assert {line.split()[0] for line in out.splitlines()[1:]} == {"retention.ms=7200000", "cleanup.policy=compact"}

    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "topics", "--entity-name", "configured",
        "--delete-config", "cleanup.policy")
    truth = client.describe_configs([resource])[resource].result(30)
    assert (truth["retention.ms"].value, truth["cleanup.policy"].value) == ("7200000", "delete")


def test_verifiable_producer_and_consumer(tools, broker):
    create_topic(broker.bootstrap, "verified", 3)
    sent = tools.run("kafka-verifiable-producer", "--bootstrap-server", broker.bootstrap, "--topic", "verified",
                     "--max-messages", "300", "--acks", "-1")
    events = [json.loads(line) for line in sent.stdout.splitlines()]
    acked = {(e["partition"], e["offset"]) for e in events if e["name"] == "producer_send_success"}
    summary = next(e for e in events if e["name"] == "tool_data")
    assert (summary["sent"], summary["acked"], len(acked)) == (300, 300, 300), sent.stderr

    got = tools.run("kafka-verifiable-consumer", "--bootstrap-server", broker.bootstrap, "--topic", "verified",
                    "--group-id", "verifier", "--group-protocol", "classic", "--max-messages", "300")
    events = [json.loads(line) for line in got.stdout.splitlines()]
    consumed = {(part["partition"], offset) for e in events if e["name"] == "records_consumed"
                for part in e["partitions"] for offset in range(part["minOffset"], part["maxOffset"] + 1)}
    assert consumed == acked, got.stderr   # none lost, none invented
    # Unkeyed records stick to one partition: the others are empty, with nothing committed.
    ends = {p: high or -1001 for p, (_, high) in watermarks(broker, "verified", 3).items()}
    assert committed(broker, "verifier", "verified", 3) == ends


def test_producer_and_consumer_perf_tests(tools, broker):
    create_topic(broker.bootstrap, "perf", 3)
    out = run(tools, broker, "kafka-producer-perf-test", "--topic", "perf", "--num-records", "2000",
              "--record-size", "100", "--throughput", "-1", "--command-property", "acks=all")
    assert out.splitlines()[-1].startswith("2000 records sent")
    assert sum(high for _, high in watermarks(broker, "perf", 3).values()) == 2000

    out = run(tools, broker, "kafka-consumer-perf-test", "--topic", "perf", "--messages", "2000",
              "--timeout", "30000")
    header, row = out.splitlines()[-2:]
    assert dict(zip(header.split(", "), row.split(", ")))["data.consumed.in.nMsg"] == "2000"


def test_java_clients_round_trip(tools, broker):
    """An idempotent KafkaProducer and a classic-group KafkaConsumer (jvm/.../ClientRoundTrip)."""
    create_topic(broker.bootstrap, "java-clients", 3)
    events = json_lines(tools.run("headwater.jvm.ClientRoundTrip", broker.bootstrap, "java-clients", "java-group",
                                  "50"))
    sent = [(e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "sent"]
    received = [(e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "received"]
    truth = [(p, o, k.decode(), v.decode()) for p, o, k, v, _ in confluent_consume(broker.bootstrap, "java-clients",
                                                                                   range(3), 50)]
    assert sorted(sent) == sorted(received) == sorted(truth)
    per_partition = {p: sorted(o for q, o, _, _ in sent if q == p) for p in range(3)}
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())   # no duplicates
    assert {e["partition"]: e["offset"] for e in events if e["event"] == "committed"} \
        == {p: len(o) for p, o in per_partition.items() if o}
    assert committed(broker, "java-group", "java-clients", 3) == {p: len(o) or -1001 for p, o in per_partition.items()}


def test_java_consumers_in_a_consumer_protocol_group(tools, broker):
    """Three KafkaConsumers with group.protocol=consumer (KIP-848; jvm/.../ConsumerProtocolGroup):
    the broker's assignment covers every partition once, each record is read once, commits
    (OffsetCommit v9 with the member epoch) land."""
    create_topic(broker.bootstrap, "java-848", 3)
    events = json_lines(tools.run("headwater.jvm.ConsumerProtocolGroup", broker.bootstrap, "java-848", "java-848-group",
                                  "3", "60"))
    assigned = [(e["member"], e["partition"]) for e in events if e["event"] == "assigned"]
    assert sorted(p for _, p in assigned) == [0, 1, 2] and {m for m, _ in assigned} == {0, 1, 2}
    sent = sorted((e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "sent")
    received = sorted((e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "received")
    truth = sorted((p, o, k.decode(), v.decode()) for p, o, k, v, _ in confluent_consume(broker.bootstrap, "java-848",
                                                                                         range(3), 60))
    assert received == sent == truth                                          # every record once
    ends = {p: high for p, (_, high) in watermarks(broker, "java-848", 3).items()}
    last_commits = {e["partition"]: e["offset"] for e in events if e["event"] == "committed"}
    assert last_commits == {p: end for p, end in ends.items() if end}
    assert committed(broker, "java-848-group", "java-848", 3) == {p: end or -1001 for p, end in ends.items()}


def table(stdout: str, first_column: str) -> list[dict[str, str]]:
    """The rows of a whitespace-aligned table whose header starts with `first_column`."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [first_column])
    header = lines[start].split()
    return [dict(zip(header, line.split())) for line in lines[start + 1:] if line.strip()]


def test_consumer_groups_delete_offsets_and_group(tools, broker):
    create_topic(broker.bootstrap, "forgotten", 3)
    produce(broker, "forgotten", 30)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "forgetful"})
    consumer.commit(offsets=[TopicPartition("forgotten", p, 1 + p) for p in range(3)], asynchronous=False)
    consumer.close()

    out = run(tools, broker, "kafka-consumer-groups", "--delete-offsets", "--group", "forgetful",
              "--topic", "forgotten:1")
    assert table(out, "TOPIC") == [{"TOPIC": "forgotten", "PARTITION": "1", "STATUS": "Successful"}]
    assert committed(broker, "forgetful", "forgotten", 3) == {0: 1, 1: -1001, 2: 3}

    run(tools, broker, "kafka-consumer-groups", "--delete", "--group", "forgetful")
    client = admin(broker.bootstrap)
    groups = client.list_consumer_groups().result(30).valid
    assert "forgetful" not in {g.group_id for g in groups}
    assert "forgetful" not in run(tools, broker, "kafka-consumer-groups", "--list").split()


def test_log_dirs_sizes(tools, broker):
    create_topic(broker.bootstrap, "sized", 2)
    produce(broker, "sized", 40)
    out = run(tools, broker, "kafka-log-dirs", "--describe", "--topic-list", "sized")
    [described] = json.loads(out.splitlines()[-1])["brokers"]
    [log_dir] = described["logDirs"]
    assert log_dir["logDir"] == str(broker.data_dir)
    on_disk = {f"sized-{p}": sum(f.stat().st_size for f in (broker.data_dir / f"sized-{p}").glob("*.log"))
               for p in range(2)}
    assert {p["partition"]: p["size"] for p in log_dir["partitions"]} == on_disk


def test_acls_add_list_remove(tools, broker):
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, \
        ResourceType
    run(tools, broker, "kafka-acls", "--add", "--allow-principal", "User:erin", "--operation", "Read",
        "--operation", "Describe", "--topic", "erins", "--resource-pattern-type", "prefixed")
    everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    client = admin(broker.bootstrap)

    def truth():
        return {(b.restype.name, b.name, b.resource_pattern_type.name, b.principal, b.operation.name,
                 b.permission_type.name) for b in client.describe_acls(everything).result(30)}
    assert truth() == {("TOPIC", "erins", "PREFIXED", "User:erin", op, "ALLOW") for op in ("READ", "DESCRIBE")}
    listed = run(tools, broker, "kafka-acls", "--list", "--topic", "erins", "--resource-pattern-type", "prefixed")
    assert sorted(re.findall(r"principal=(\S+), host=\*, operation=(\w+), permissionType=(\w+)", listed)) \
        == [("User:erin", "DESCRIBE", "ALLOW"), ("User:erin", "READ", "ALLOW")]

    run(tools, broker, "kafka-acls", "--remove", "--force", "--allow-principal", "User:erin", "--operation", "Read",
        "--topic", "erins", "--resource-pattern-type", "prefixed")
    assert truth() == {("TOPIC", "erins", "PREFIXED", "User:erin", "DESCRIBE", "ALLOW")}


def test_transactions_list_describe_and_producers(tools, broker):
    from confluent_kafka import Producer
    create_topic(broker.bootstrap, "txn-tools", 2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tools-txn"})
    producer.init_transactions()
    producer.begin_transaction()
    delivered = []
    for i in range(10):
        producer.produce("txn-tools", key=f"k{i}", value=f"v{i}", partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append((msg.partition(), msg.offset())))
    producer.flush(30)
    starts = {p: min(o for q, o in delivered if q == p) for p in range(2)}

    [row] = [r for r in table(run(tools, broker, "kafka-transactions", "list"), "TransactionalId")
             if r["TransactionalId"] == "tools-txn"]
    assert row["TransactionState"] == "Ongoing"
    [described] = table(run(tools, broker, "kafka-transactions", "describe", "--transactional-id", "tools-txn"),
                        "CoordinatorId")
    assert described["ProducerId"] == row["ProducerId"]
    assert set(described["TopicPartitions"].split(",")) == {"txn-tools-0", "txn-tools-1"}
    for p in range(2):
        [state] = table(run(tools, broker, "kafka-transactions", "describe-producers", "--topic", "txn-tools",
                            "--partition", str(p)), "ProducerId")
        assert (state["ProducerId"], state["CurrentTransactionStartOffset"]) == (row["ProducerId"], str(starts[p]))

    producer.commit_transaction()
    [described] = table(run(tools, broker, "kafka-transactions", "describe", "--transactional-id", "tools-txn"),
                        "CoordinatorId")
    assert described["TransactionState"] == "CompleteCommit"
    [state] = table(run(tools, broker, "kafka-transactions", "describe-producers", "--topic", "txn-tools",
                        "--partition", "0"), "ProducerId")
    assert state["CurrentTransactionStartOffset"] == "None"


def test_transactions_abort_a_hanging_transaction(tools, broker, request):
    """An open transaction holds back the last stable offset; `kafka-transactions abort`
    (WriteTxnMarkers) ends it: read_committed readers get past it and never see its records."""
    from confluent_kafka import Producer
    create_topic(broker.bootstrap, "hanging", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "hanging-txn"})
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(3):
        producer.produce("hanging", value=f"never committed {i}".encode())
    producer.flush(30)
    request.addfinalizer(producer.abort_transaction)
    after = confluent_produce(broker.bootstrap, "hanging", [(None, f"plain {i}".encode(), []) for i in range(2)])
    assert [offset for _, offset, *_ in after] == [3, 4]
    assert stable_end(broker.bootstrap, "hanging") == 0   # held back by the open transaction
    # the coordinator still knows the transaction as Ongoing: it is open, not hanging
    assert "hanging-txn" not in run(tools, broker, "kafka-transactions", "find-hanging", "--broker-id", "0")

    [state] = table(run(tools, broker, "kafka-transactions", "describe-producers", "--topic", "hanging",
                        "--partition", "0"), "ProducerId")
    assert state["CurrentTransactionStartOffset"] == "0"
    run(tools, broker, "kafka-transactions", "abort", "--topic", "hanging", "--partition", "0",
        "--start-offset", state["CurrentTransactionStartOffset"])
    assert watermarks(broker, "hanging", 1)[0][1] == 6   # three records, two plain ones, the abort marker
    assert stable_end(broker.bootstrap, "hanging") == 6
    visible = confluent_consume(broker.bootstrap, "hanging", [0], 2, **{"isolation.level": "read_committed"})
    assert [(o, v) for _, o, _, v, _ in visible] == [(o, v) for _, o, _, v, _ in after]
    [state] = table(run(tools, broker, "kafka-transactions", "describe-producers", "--topic", "hanging",
                        "--partition", "0"), "ProducerId")
    assert state["CurrentTransactionStartOffset"] == "None"


def share_records(broker, topic, group, count) -> list[str]:
    """Produce `count` records to a new topic, and let `group` start from the earliest offset."""
    create_topic(broker.bootstrap, topic, 2)
    return [f"{key.decode()}\t{value.decode()}" for _, _, key, value, _ in produce(broker, topic, count)]


def test_share_groups_console_consumer_list_and_state(tools, broker):
    records = share_records(broker, "queued", "tools-share", 25)
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "groups", "--entity-name", "tools-share",
        "--add-config", "share.auto.offset.reset=earliest")
    out = run(tools, broker, "kafka-console-share-consumer", "--topic", "queued", "--group", "tools-share",
              "--max-messages", "25", "--formatter-property", "print.key=true", "--timeout-ms", "30000")
    assert sorted(out.splitlines()) == sorted(records)
    assert "tools-share" in run(tools, broker, "kafka-share-groups", "--list").split()
    [state] = table(run(tools, broker, "kafka-share-groups", "--describe", "--group", "tools-share", "--state"),
                    "GROUP")
    assert (state["STATE"], state["#MEMBERS"]) == ("Empty", "0")


def test_share_groups_describe_offsets(tools, broker):
    share_records(broker, "queued-offsets", "offsets-share", 10)
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "groups", "--entity-name", "offsets-share",
        "--add-config", "share.auto.offset.reset=earliest")
    run(tools, broker, "kafka-console-share-consumer", "--topic", "queued-offsets", "--group", "offsets-share",
        "--max-messages", "10", "--timeout-ms", "30000")
    out = run(tools, broker, "kafka-share-groups", "--describe", "--group", "offsets-share")
    ends = {p: high for p, (_, high) in watermarks(broker, "queued-offsets", 2).items()}
    assert {int(r["PARTITION"]): (int(r["START-OFFSET"]), int(r["LAG"])) for r in table(out, "GROUP")} \
        == {p: (end, 0) for p, end in ends.items()}


def test_share_groups_reset_offsets(tools, broker):
    records = share_records(broker, "queued-reset", "reset-share", 10)
    out = run(tools, broker, "kafka-share-groups", "--reset-offsets", "--group", "reset-share", "--topic",
              "queued-reset", "--to-earliest", "--execute")
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out, "GROUP")} == {0: 0, 1: 0}
    # reset to the earliest offset, not share.auto.offset.reset's default (latest): every record is read
    out = run(tools, broker, "kafka-console-share-consumer", "--topic", "queued-reset", "--group", "reset-share",
              "--max-messages", "10", "--formatter-property", "print.key=true", "--timeout-ms", "30000")
    assert sorted(out.splitlines()) == sorted(records)


def share_consume(consumer, count: int) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of `count` records a confluent-kafka ShareConsumer receives."""
    got, deadline = [], time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        got += [(m.partition(), m.offset(), m.value()) for m in consumer.poll(0.5) if not m.error()]
    return got


def test_share_groups_reset_to_an_offset_describe_and_delete_offsets(tools, broker):
    """--reset-offsets --to-offset moves a share-partition's start offset back (refused while the
    group has a member), --describe shows it with its lag, and --delete-offsets forgets the topic."""
    from confluent_kafka import ShareConsumer
    create_topic(broker.bootstrap, "queued-moved", 2)
    sent = produce(broker, "queued-moved", 12)
    ends = {p: high for p, (_, high) in watermarks(broker, "queued-moved", 2).items()}

    def offsets() -> dict[int, tuple[int, int]]:
        out = run(tools, broker, "kafka-share-groups", "--describe", "--group", "moved-share")
        return {int(r["PARTITION"]): (int(r["START-OFFSET"]), int(r["LAG"])) for r in table(out, "GROUP")
                if r["TOPIC"] == "queued-moved"}

    run(tools, broker, "kafka-share-groups", "--reset-offsets", "--group", "moved-share", "--topic",
        "queued-moved", "--to-latest", "--execute")
    out = run(tools, broker, "kafka-share-groups", "--reset-offsets", "--group", "moved-share", "--topic",
              "queued-moved:0", "--to-offset", "2", "--execute")
    assert {int(r["PARTITION"]): int(r["NEW-OFFSET"]) for r in table(out, "GROUP")} == {0: 2}
    assert offsets() == {0: (2, ends[0] - 2), 1: (ends[1], 0)}

    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "moved-share"})
    consumer.subscribe(["queued-moved"])
    try:
        truth = sorted((p, o, v) for p, o, _, v, _ in sent if p == 0 and o >= 2)
        assert sorted(share_consume(consumer, len(truth))) == truth
        refused = tools.run("kafka-share-groups", "--bootstrap-server", broker.bootstrap, "--reset-offsets",
                            "--group", "moved-share", "--topic", "queued-moved", "--to-earliest", "--execute")
        assert refused.exit_code != 0 or "not empty" in refused.stdout + refused.stderr
        # the refusal moved nothing (the received records are acknowledged with the next poll)
        assert offsets()[0][0] >= 2 and offsets()[1] == (ends[1], 0)
    finally:
        consumer.close()

    run(tools, broker, "kafka-share-groups", "--delete-offsets", "--group", "moved-share", "--topic", "queued-moved")
    assert "Share group 'moved-share' has no offset information." in run(
        tools, broker, "kafka-share-groups", "--describe", "--group", "moved-share")
    # forgotten: the group starts afresh there, from share.auto.offset.reset
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "groups", "--entity-name", "moved-share",
        "--add-config", "share.auto.offset.reset=earliest")
    consumer = ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "moved-share"})
    consumer.subscribe(["queued-moved"])
    try:
        assert sorted(share_consume(consumer, len(sent))) == sorted((p, o, v) for p, o, _, v, _ in sent)
    finally:
        consumer.close()


def json_lines(done) -> list[dict]:
    assert done.exit_code == 0, f"exited {done.exit_code}:\n{done.stdout}\n{done.stderr}"
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_java_transactional_copy_with_offsets_in_the_transaction(tools, broker):
    """A transactional KafkaProducer with sendOffsetsToTransaction (jvm/.../TransactionalCopy)."""
    create_topic(broker.bootstrap, "copy-in", 2)
    create_topic(broker.bootstrap, "copy-out", 2)
    sent = produce(broker, "copy-in", 40)
    events = json_lines(tools.run("headwater.jvm.TransactionalCopy", broker.bootstrap, "copy-in", "copy-out",
                                 "copier", "copier-txn", "40"))
    copied = {(e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "copied"}
    assert sorted((k, v) for _, _, k, v in copied) == sorted((k.decode(), v.decode().upper()) for _, _, k, v, _ in sent)

    ends = {p: high for p, (_, high) in watermarks(broker, "copy-in", 2).items()}
    assert {e["partition"]: e["offset"] for e in events if e["event"] == "committed"} == ends
    assert committed(broker, "copier", "copy-in", 2) == ends
    # a read_committed reader sees the copies and nothing of the aborted transaction
    visible = confluent_consume(broker.bootstrap, "copy-out", range(2), len(copied),
                               **{"isolation.level": "read_committed"})
    assert {(p, o, k.decode(), v.decode()) for p, o, k, v, _ in visible} == copied
    assert any(e["event"] == "aborted" for e in events)


@pytest.mark.parametrize("mode", ["implicit", "explicit"])
def test_java_share_consumer(tools, broker, mode):
    """Java's KafkaShareConsumer (jvm/.../ShareRead) in a share group reading from the earliest offset,
    acknowledging implicitly, or explicitly, releasing some records first to see them come back."""
    topic, group = f"java-queued-{mode}", f"java-share-{mode}"
    records = share_records(broker, topic, group, 30)
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "groups", "--entity-name", group,
        "--add-config", "share.auto.offset.reset=earliest")
    events = json_lines(tools.run("headwater.jvm.ShareRead", broker.bootstrap, topic, group, "30", mode))
    accepted = [e for e in events if e["acknowledged"] == "ACCEPT"]
    assert sorted(f"{e['key']}\t{e['value']}" for e in accepted) == sorted(records)
    released = sorted((e["partition"], e["offset"]) for e in events if e["acknowledged"] == "RELEASE")
    redelivered = sorted((e["partition"], e["offset"]) for e in accepted if e["delivery_count"] == 2)
    expected = sorted((p, o) for p, (_, end) in watermarks(broker, topic, 2).items() for o in range(end) if o % 5 == 0)
    assert released == redelivered == (expected if mode == "explicit" else [])


def test_tools_and_java_clients_over_sasl_ssl(tools, secured):
    """kafka-topics, the console producer and consumer, kafka-consumer-groups and Java's clients
    with SCRAM-SHA-512 over TLS (the CA as a PEM truststore)."""
    from confluent_kafka.admin import AdminClient
    run(tools, secured, "kafka-topics", "--create", "--topic", "sealed", "--partitions", "2")
    metadata = AdminClient(secured.client_config).list_topics("sealed", timeout=10).topics["sealed"]
    described = run(tools, secured, "kafka-topics", "--describe", "--topic", "sealed")
    assert sorted(describe_table(described)) == sorted(metadata.partitions) == [0, 1]

    lines = [f"line {i}" for i in range(20)]
    run(tools, secured, "kafka-console-producer", "--topic", "sealed", input="\n".join(lines) + "\n")
    out = run(tools, secured, "kafka-console-consumer", "--topic", "sealed", "--group", "sealed-readers",
              "--from-beginning", "--max-messages", "20", "--timeout-ms", "30000")
    assert sorted(out.splitlines()) == sorted(lines)
    written = confluent_consume(secured.bootstrap, "sealed", range(2), 20, **{
        k: v for k, v in secured.client_config.items() if k != "bootstrap.servers"})
    assert sorted(value.decode() for _, _, _, value, _ in written) == sorted(lines)

    # the console consumer committed what it read: the group's offsets are the ends, no lag
    ends = {p: sum(1 for q, *_ in written if q == p) for p in range(2)}
    rows = table(run(tools, secured, "kafka-consumer-groups", "--describe", "--group", "sealed-readers"), "GROUP")
    assert {int(r["PARTITION"]): (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"])) for r in rows} \
        == {p: (end, end, 0) for p, end in ends.items()}

    events = json_lines(tools.run("headwater.jvm.ClientRoundTrip", secured.bootstrap, "sealed-java", "sealed-group",
                                  "20", str(secured.command_config)))
    sent = sorted((e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "sent")
    assert sent == sorted((e["partition"], e["offset"], e["key"], e["value"]) for e in events if e["event"] == "received")
    assert sorted(v for *_, v in sent) == sorted(f"v{i}" for i in range(20))


def test_cluster_id_and_endpoints(tools, broker):
    metadata = admin(broker.bootstrap).list_topics(timeout=10)
    # kafka-cluster takes its subcommand first
    done = tools.run("kafka-cluster", "cluster-id", "--bootstrap-server", broker.bootstrap)
    assert (done.exit_code, done.stdout.strip()) == (0, f"Cluster ID: {metadata.cluster_id}")
    [endpoint] = table(tools.run("kafka-cluster", "list-endpoints", "--bootstrap-server", broker.bootstrap).stdout, "ID")
    assert (endpoint["ID"], endpoint["HOST"], endpoint["PORT"]) == ("0", "127.0.0.1", str(broker.port))


def test_scram_user_made_by_kafka_configs_logs_in(tools, secured):
    from confluent_kafka.admin import AdminClient
    run(tools, secured, "kafka-configs", "--alter", "--entity-type", "users", "--entity-name", "zed",
        "--add-config", "SCRAM-SHA-512=[iterations=8192,password=zed-pw]")
    described = run(tools, secured, "kafka-configs", "--describe", "--entity-type", "users", "--entity-name", "zed")
    assert described.strip() == "SCRAM credential configs for user-principal 'zed' are SCRAM-SHA-512=iterations=8192"
    zed = AdminClient({**secured.client_config, "sasl.username": "zed", "sasl.password": "zed-pw"})
    assert set(zed.list_topics(timeout=30).brokers) == {0}   # authenticated with what the tool stored


def test_a_tool_calling_system_exit_ends_its_jvm_not_the_next_tool(tools, broker):
    """argparse4j answers bad arguments with System.exit(1): the launcher reports it, and the
    next tool runs in a new JVM."""
    done = tools.run("kafka-cluster", "--bootstrap-server", broker.bootstrap, "cluster-id")
    assert done.exit_code == 1 and "usage: kafka-cluster" in done.stderr
    assert "Cluster ID: " in tools.run("kafka-cluster", "cluster-id", "--bootstrap-server", broker.bootstrap).stdout


def test_client_quotas_set_by_kafka_configs(tools, broker, request):
    """AlterClientQuotas and DescribeClientQuotas, with Headwater's own CLI reading them back."""
    # the default quota would throttle every later client of the module's broker
    request.addfinalizer(lambda: run(tools, broker, "kafka-configs", "--alter", "--entity-type", "clients",
                                     "--entity-default", "--delete-config", "request_percentage"))
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "clients", "--entity-name", "metered",
        "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048")
    run(tools, broker, "kafka-configs", "--alter", "--entity-type", "clients", "--entity-default",
        "--add-config", "request_percentage=50")
    read_back = subprocess.run([sys.executable, "-m", "headwater", "quotas", "describe", "--bootstrap-server",
                                broker.bootstrap, "--json"], capture_output=True, text=True, check=True)
    assert {q["client_id"]: q for q in json.loads(read_back.stdout)} == {
        "<default>": {"client_id": "<default>", "producer_byte_rate": None, "consumer_byte_rate": None,
                      "request_percentage": 50.0},
        "metered": {"client_id": "metered", "producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0,
                    "request_percentage": None}}
    described = run(tools, broker, "kafka-configs", "--describe", "--entity-type", "clients", "--entity-name", "metered")
    assert described.strip() == \
        "Quota configs for client-id 'metered' are consumer_byte_rate=2048.0, producer_byte_rate=1024.0"
