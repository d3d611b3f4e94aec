"""Kafka's own share groups (KIP-932) with a dead-letter topic (KIP-1191: Kafka 4.4 writes the dead
letters broker-side, as Headwater's broker does), configured with `headwater groups alter`, the
node leading the first partition killed while a confluent-kafka ShareConsumer works through the
records: every good record is accepted, every poison one is rejected and lands in the dead-letter
topic, with its source in the KIP-1191 headers.

What Kafka 4.4 guarantees here, from its source (kafka.server.share.SharePartition and
org.apache.kafka.server.share.dlq.ShareGroupDLQStateManager), is at least once, and only eventually:
- a REJECT is persisted as ARCHIVING and answered; only then does the share-partition leader
  produce the letter (acks=all; five attempts over about 30 s on a lost connection or a moved
  leader; after those, or on any other error, it logs "Failed to write to DLQ" and goes on);
- if that leader dies first, the partition's next leader writes the letters it finds ARCHIVING,
  but only when it loads the partition, on the first ShareFetch for it: a consumer that has
  closed never makes it, so the test keeps polling until every letter is there;
- a letter may be written twice (a crash between the write and the ARCHIVED state), and an
  acknowledgement the stopped node never received is not applied: the record comes back, so a
  record counts as handled only once commit_sync reports its partition's acknowledgements done."""
import subprocess
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, AcknowledgeType, Consumer, ShareConsumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import confluent_produce
from tests.support.kafka_cluster import leader_of

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
    poison = {value for value in where if is_poison(value)}

    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    dlq = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False})
    dlq.assign([TopicPartition(DLQ, 0, OFFSET_BEGINNING)])
    accepted, rejected, letters, down = set(), set(), [], None
    # a hang guard, not a timing: a record whose acknowledgement was lost comes back when its
    # acquisition lock (30 s) runs out, and a letter's write is retried for up to ~36 s
    deadline = time.monotonic() + 180
    try:
        # until Kafka has taken every record's acknowledgement and written every poison one's letter
        while accepted | rejected != set(where) or not poison <= {value for value, _ in letters}:
            assert time.monotonic() < deadline, \
                f"{len(accepted)} accepted, {len(rejected)} rejected, letters for {sorted({v for v, _ in letters})}"
            polled = {}
            for message in consumer.poll(0.5):
                if message.error():
                    continue
                consumer.acknowledge(message, AcknowledgeType.REJECT if is_poison(message.value()) else AcknowledgeType.ACCEPT)
                polled.setdefault(message.partition(), []).append(message.value())
            failed = {tp.partition for tp, error in consumer.commit_sync().items() if error is not None}
            for value in (v for partition, values in polled.items() if partition not in failed for v in values):
                (rejected if is_poison(value) else accepted).add(value)
            letters += [(m.value(), m.headers() or []) for m in dlq.consume(100, 0) if not m.error()]
            handled = len(accepted) + len(rejected)
            if down is None and handled >= COUNT // 3:
                down = leader_of(bootstrap, TOPIC)
                kafka_cluster.stop_node(down)
            elif down is not None and handled >= 2 * COUNT // 3 and kafka_cluster.procs[down].poll() is not None:
                kafka_cluster.start_node(down)
    finally:
        consumer.close()
        dlq.close()
        if down is not None and kafka_cluster.procs[down].poll() is not None:
            kafka_cluster.start_node(down)
    assert down is not None
    assert {value for value, _ in letters} == poison   # and no letter of a good record
    for value, headers in letters:
        found = {name.removeprefix("__dlq.errors."): v.decode() for name, v in headers if name.startswith("__dlq.")}
        assert (found["topic"], found["group"]) == (TOPIC, GROUP)
        assert (int(found["partition"]), int(found["offset"])) == where[value]
