"""Helpers of the tests on Apache Kafka (the session's `kafka_cluster`, tests/conftest.py)."""
from confluent_kafka.admin import AdminClient


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node leading a partition of `topic` now: the one to kill, so that leadership moves."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=30).topics[topic].partitions[partition].leader
