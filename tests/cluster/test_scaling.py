"""docs/scaling.md's move of a topic and a consumer group's committed offsets from a Headwater
broker to Apache Kafka, run command by command: after them, the group's committed offsets on
the cluster equal those on Headwater, and a consumer of the group on the cluster reads exactly
the records it had not consumed on Headwater."""
import json
import subprocess
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

from headwater.testing import BrokerProcess, run_java

TOPIC, GROUP = "moving", "movers"
# docs/scaling.md's jq filter: a group's committed offsets as kafka-consumer-groups' --from-file CSV
OFFSETS_CSV = '.offsets[] | select(.committed_offset != null) | "\\(.topic),\\(.partition),\\(.committed_offset)"'


def headwater(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "headwater", *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def consume(bootstrap: str, count: int) -> list[tuple[int, bytes, bytes]]:
    """`count` records read by the group from its committed offsets (or the start), committed after."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([TOPIC])
    read = []
    while len(read) < count:
        read += [(m.partition(), m.key(), m.value()) for m in consumer.consume(count - len(read), 5) if not m.error()]
    consumer.commit(asynchronous=False)
    consumer.close()
    return read


def committed(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP})
    offsets = consumer.committed([TopicPartition(TOPIC, p) for p in range(3)], timeout=30)
    consumer.close()
    return {tp.partition: tp.offset for tp in offsets if tp.offset >= 0}


def test_a_group_and_its_topic_move_to_kafka(kafka_cluster, tmp_path):
    records = [(f"k{i % 11}".encode(), f"order {i}".encode()) for i in range(90)]
    with BrokerProcess(tmp_path / "headwater", "--num-partitions", "3") as hw:
        producer = Producer({"bootstrap.servers": hw.bootstrap, "acks": "all"})
        for key, value in records:
            producer.produce(TOPIC, value, key)
        assert producer.flush(30) == 0
        consumed = consume(hw.bootstrap, 40)
        before = committed(hw.bootstrap)

        # the documented commands: the topic, its records partition by partition, the group's offsets
        partitions = json.loads(headwater("topics", "describe", TOPIC, "--json", "--bootstrap-server", hw.bootstrap))
        headwater("topics", "create", TOPIC, "--partitions", str(len(partitions["partitions"])),
                  "--bootstrap-server", kafka_cluster.bootstrap)
        for partition in partitions["partitions"]:
            copy = (f"kcat -C -b {hw.bootstrap} -t {TOPIC} -p {partition['partition']} -o beginning -e -q -K '\\t'"
                    f" | kcat -P -b {kafka_cluster.bootstrap} -t {TOPIC} -p {partition['partition']} -K '\\t'")
            subprocess.run(copy, shell=True, check=True, timeout=60)
        csv = tmp_path / "offsets.csv"
        subprocess.run(f"{sys.executable} -m headwater groups describe {GROUP} --json --bootstrap-server {hw.bootstrap}"
                       f" | jq -r '{OFFSETS_CSV}' > {csv}", shell=True, check=True, timeout=60)
    reset = run_java("kafka-consumer-groups", "--bootstrap-server", kafka_cluster.bootstrap, "--reset-offsets",
                     "--group", GROUP, "--from-file", str(csv), "--execute")
    assert reset.exit_code == 0, reset.stdout + reset.stderr

    assert committed(kafka_cluster.bootstrap) == before and sum(before.values()) == 40
    rest = consume(kafka_cluster.bootstrap, len(records) - len(consumed))
    assert sorted((k, v) for _, k, v in consumed + rest) == sorted(records)   # every record once, none twice
