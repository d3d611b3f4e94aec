"""Kafka's own share groups (KIP-932) with a dead-letter topic (KIP-1191: Kafka 4.4 writes the dead
letters broker-side, as Headwater's broker does), configured with `headwater groups alter`, the
node leading the first partition killed while a confluent-kafka ShareConsumer works through the
records: every good record is accepted (at least once: share groups redeliver what a lost node
left unacknowledged), every poison one lands in the dead-letter topic once per rejection,
with its source in the KIP-1191 headers."""
import subprocess
import sys
import time

from confluent_kafka import AcknowledgeType, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from ..integration.clients import confluent_consume, confluent_produce
from .conftest import leader_of

# Kafka writes dead letters only to a topic named with errors.deadletterqueue.topic.name.prefix
# ("dlq." by default) whose errors.deadletterqueue.group.enable is true; else it archives the record
# and logs an error
TOPIC, DLQ, GROUP = "cluster-jobs", "dlq.cluster-jobs", "cluster-workers"
COUNT = 150


def is_poison(value: bytes) -> bool:
    return int(value) % 7 == 3


def test_share_group_dead_letters_across_a_node_crash(kafka_cluster):
    bootstrap = kafka_cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(TOPIC, 3), NewTopic(DLQ, 1, config={"errors.deadletterqueue.group.enable": "true"})]
    for future in admin.create_topics(topics).values():
        future.result(30)
    altered = subprocess.run([sys.executable, "-m", "headwater", "groups", "alter", GROUP, "--bootstrap-server", bootstrap,
                              "--config", "share.auto.offset.reset=earliest",
                              "--config", f"errors.deadletterqueue.topic.name={DLQ}",
                              "--config", "errors.deadletterqueue.copy.record.enable=true"],
                             capture_output=True, text=True, timeout=60)
    assert altered.returncode == 0, altered.stderr
    sent = confluent_produce(bootstrap, TOPIC, [(None, str(i).encode(), []) for i in range(COUNT)], acks="all")
    where = {value: (partition, offset) for partition, offset, _, value, _ in sent}

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    accepted, rejected, down = set(), [], None
    deadline = time.monotonic() + 120
    try:
        while len(accepted) + len(set(rejected)) < COUNT:
            assert time.monotonic() < deadline, f"{len(accepted)} accepted, {len(rejected)} rejected"
            for message in consumer.poll(0.5):
                if message.error():
                    continue
                poison = is_poison(message.value())
                consumer.acknowledge(message, AcknowledgeType.REJECT if poison else AcknowledgeType.ACCEPT)
                (rejected.append if poison else accepted.add)(message.value())
            consumer.commit_sync()
            handled = len(accepted) + len(rejected)
            if down is None and handled >= COUNT // 3:
                down = leader_of(bootstrap, TOPIC)
                kafka_cluster.stop_node(down)
            elif down is not None and handled >= 2 * COUNT // 3 and kafka_cluster.procs[down].poll() is not None:
                kafka_cluster.start_node(down)
    finally:
        consumer.close()
        if down is not None and kafka_cluster.procs[down].poll() is not None:
            kafka_cluster.start_node(down)
    assert down is not None
    assert accepted == {v for v in where if not is_poison(v)}
    letters = confluent_consume(bootstrap, DLQ, [0], len(rejected), timeout=60)
    assert sorted(value for _, _, _, value, _ in letters) == sorted(rejected)
    assert set(rejected) == {v for v in where if is_poison(v)}
    for _, _, _, value, headers in letters:
        found = {name.removeprefix("__dlq.errors."): v.decode() for name, v in headers if name.startswith("__dlq.")}
        assert (found["topic"], found["group"]) == (TOPIC, GROUP)
        assert (int(found["partition"]), int(found["offset"])) == where[value]
