"""Consumer groups with real clients: load balancing, fan-out, failover of a killed member, restarts."""
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from kafka import KafkaAdminClient, KafkaConsumer

from tests.support.clients import confluent_produce, kcat
from tests.support.groups import MemberProcess, admin, committed, create_topic, wait_for, wait_stable

CLIENTS = [("confluent", "range"), ("confluent", "cooperative-sticky"), ("kafka-python", "roundrobin")]


def produce_numbered(bootstrap, topic, n, start=0):
    """Produce values m<i>; returns {(partition, offset): value} as the broker acknowledged them."""
    delivered = confluent_produce(bootstrap, topic, [(f"k{i % 23}".encode(), f"m{i}".encode(), [])
                                                     for i in range(start, start + n)])
    return {(p, o): v.decode() for p, o, _, v, _ in delivered}


def log_end_offsets(truth):
    ends = {}
    for p, o in truth:
        ends[p] = max(ends.get(p, 0), o + 1)
    return ends


@pytest.mark.parametrize("client,assignor", CLIENTS)
def test_three_members_share_six_partitions_each_message_processed_once(broker, tmp_path, client, assignor):
    create_topic(broker.bootstrap, "orders", 6)
    members = [MemberProcess(broker.bootstrap, "inventory", "orders", client, tmp_path / f"m{i}.txt",
                             assignor=assignor) for i in range(3)]
    wait_stable(broker, "inventory", 3, 6)
    truth = produce_numbered(broker.bootstrap, "orders", 600)
    wait_for(lambda: sum(len(m.records()) for m in members) >= len(truth), message="the group to process all")
    for m in members:
        m.stop()
    processed = [r for m in members for r in m.records()]
    assert sorted(processed) == sorted((p, o, v) for (p, o), v in truth.items())  # no loss, no duplicate
    owners = [{p for p, _, _ in m.records()} for m in members]
    assert all(owners) and not (owners[0] & owners[1] or owners[0] & owners[2] or owners[1] & owners[2])
    assert committed(broker.bootstrap, "inventory", "orders", range(6)) == log_end_offsets(truth)


def test_consumers_started_together_land_in_one_generation(start_broker):
    # the broker's default group.initial.rebalance.delay.ms, Kafka's (tests' brokers start with 0)
    broker = start_broker("--group-initial-rebalance-delay-ms", "3000")
    create_topic(broker.bootstrap, "orders", 4)
    assigned: dict[int, list[list[int]]] = {0: [], 1: []}
    consumers = []
    for i in assigned:
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "together",
                             "partition.assignment.strategy": "range"})
        consumer.subscribe(["orders"], on_assign=lambda c, parts, i=i: assigned[i].append(
            sorted(p.partition for p in parts)))
        consumers.append(consumer)

    def both_assigned():
        for consumer in consumers:
            consumer.poll(0.1)
        return all(assigned[i] and assigned[i][-1] for i in assigned)
    wait_for(both_assigned, message="both consumers to get partitions")
    for consumer in consumers:
        consumer.close()
    # one generation: each got its share once, no first assignment of all four taken back
    assert [len(assigned[i]) for i in assigned] == [1, 1], assigned
    assert sorted(assigned[0][0] + assigned[1][0]) == [0, 1, 2, 3]


def test_two_groups_each_see_every_message(broker, tmp_path):
    create_topic(broker.bootstrap, "orders", 6)
    inventory = [MemberProcess(broker.bootstrap, "inventory", "orders", "confluent", tmp_path / f"i{i}.txt")
                 for i in range(2)]
    analytics = MemberProcess(broker.bootstrap, "analytics", "orders", "kafka-python", tmp_path / "a.txt")
    wait_stable(broker, "inventory", 2, 6)
    wait_stable(broker, "analytics", 1, 6)
    truth = produce_numbered(broker.bootstrap, "orders", 300)
    expected = sorted((p, o, v) for (p, o), v in truth.items())
    wait_for(lambda: len(analytics.records()) >= len(truth) and sum(len(m.records()) for m in inventory) >= len(truth),
             message="both groups to process all")
    for m in [*inventory, analytics]:
        m.stop()
    assert sorted(analytics.records()) == expected
    assert sorted(r for m in inventory for r in m.records()) == expected


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_killed_member_partitions_move_and_resume_at_last_commit(broker, tmp_path, client):
    create_topic(broker.bootstrap, "orders", 6)
    # The victim commits every 7 messages, so it dies with processed-but-uncommitted records;
    # the others commit each one, so a rebalance redelivers nothing of theirs.
    victim = MemberProcess(broker.bootstrap, "inventory", "orders", client, tmp_path / "victim.txt",
                           commit_every=7, delay_ms=20, session_timeout_ms=6000)
    survivors = [MemberProcess(broker.bootstrap, "inventory", "orders", client, tmp_path / f"s{i}.txt", delay_ms=20,
                               session_timeout_ms=6000) for i in range(2)]
    wait_stable(broker, "inventory", 3, 6)
    truth = produce_numbered(broker.bootstrap, "orders", 600)
    wait_for(lambda: len(victim.records()) >= 40, message="the victim to process some")
    victim.kill()
    taken = victim.records()
    victim_partitions = {p for p, _, _ in taken}
    time.sleep(0.5)  # a commit the victim sent just before dying still lands first
    at_kill = committed(broker.bootstrap, "inventory", "orders", victim_partitions)
    wait_for(lambda: len({(p, o) for s in survivors for p, o, _ in s.records()} | {(p, o) for p, o, _ in taken})
             >= len(truth), timeout=90, message="the survivors to take over")
    for s in survivors:
        s.stop()
    rest = [r for s in survivors for r in s.records()]
    assert len(rest) == len(set(rest)), "a survivor's record was delivered twice"
    assert sorted(set(rest) | set(taken)) == sorted((p, o, v) for (p, o), v in truth.items())
    uncommitted = {r for r in taken if r[1] >= max(at_kill[r[0]], 0)}
    assert set(rest) & set(taken) == uncommitted  # redelivered: exactly what the victim had not committed
    assert {p for p, _, _ in rest} >= victim_partitions  # its partitions moved to the survivors


@pytest.mark.parametrize("how", ["stop", "kill"])
def test_broker_restart_preserves_committed_offsets(broker, how):
    truth = produce_numbered(broker.bootstrap, "events", 100)
    first = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "audit", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest"})
    first.subscribe(["events"])
    seen = []
    while len(seen) < 50:
        msg = first.poll(1.0)
        if msg is not None and not msg.error():
            seen.append((msg.partition(), msg.offset(), msg.value().decode()))
            first.commit(msg, asynchronous=False)
    before = committed(broker.bootstrap, "audit", "events", range(3))
    first.close()
    client = admin(broker.bootstrap)
    doomed = [ConsumerGroupTopicPartitions("doomed", [TopicPartition("events", 0, 7)])]
    client.alter_consumer_group_offsets(doomed)["doomed"].result(30)
    client.delete_consumer_groups(["doomed"])["doomed"].result(30)  # tombstones in __consumer_offsets
    broker.stop() if how == "stop" else broker.kill()
    broker.restart()
    client = admin(broker.bootstrap)
    assert {g.group_id for g in client.list_consumer_groups().result(30).valid} == {"audit"}
    assert committed(broker.bootstrap, "doomed", "events", [0]) == {0: -1001}  # deleted stays deleted
    assert committed(broker.bootstrap, "audit", "events", range(3)) == before
    second = KafkaConsumer("events", bootstrap_servers=broker.bootstrap, group_id="audit", enable_auto_commit=False,
                           auto_offset_reset="earliest")
    second.partitions_for_topic("events")  # see group_member.py: dodges a kafka-python rejoin bug
    rest, deadline = [], time.monotonic() + 60
    while len(seen) + len(rest) < len(truth) and time.monotonic() < deadline:
        for records in second.poll(timeout_ms=500).values():
            rest += [(r.partition, r.offset, r.value.decode()) for r in records]
    second.close()
    assert sorted(seen + rest) == sorted((p, o, v) for (p, o), v in truth.items())  # continues, no repeat


def test_kcat_balanced_consumer_commits_what_it_read(broker):
    truth = produce_numbered(broker.bootstrap, "events", 40)
    out = kcat("-b", broker.bootstrap, "-G", "kcat-readers", "events", "-c", str(len(truth)), "-q",
               "-X", "auto.offset.reset=earliest", "-f", "%p %o %s\\n")
    read = {(int(p), int(o)): v for p, o, v in (line.split(" ", 2) for line in out.decode().splitlines())}
    assert read == truth
    assert committed(broker.bootstrap, "kcat-readers", "events", range(3)) == log_end_offsets(truth)


def test_kafka_python_admin_lists_describes_and_deletes_groups(broker):
    truth = produce_numbered(broker.bootstrap, "events", 30)
    member = KafkaConsumer("events", bootstrap_servers=broker.bootstrap, group_id="kp", auto_offset_reset="earliest",
                           enable_auto_commit=False)
    member.partitions_for_topic("events")  # see group_member.py: dodges a kafka-python rejoin bug
    read, deadline = 0, time.monotonic() + 60
    while read < len(truth) and time.monotonic() < deadline:
        read += sum(len(records) for records in member.poll(timeout_ms=500).values())
    member.commit()
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    assert [(g["group_id"], g["group_state"]) for g in client.list_groups()] == [("kp", "Stable")]
    (described,) = client.describe_groups(["kp"]).values()
    (m,) = described["members"]
    assert m["member_assignment"]["assigned_partitions"] == [{"topic": "events", "partitions": [0, 1, 2]}]
    offsets = client.list_group_offsets("kp")["kp"]
    assert {tp.partition: o.offset for tp, o in offsets.items()} == log_end_offsets(truth)
    member.close()
    assert client.delete_groups(["kp"]) == {"kp": "OK"}
    assert client.list_groups() == []
    client.close()
