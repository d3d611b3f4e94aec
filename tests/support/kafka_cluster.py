"""Helpers of the tests on Apache Kafka (the session's `kafka_cluster`, tests/conftest.py)."""
from confluent_kafka.admin import AdminClient

from headwater.testing import wait_until


def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node leading a partition of `topic` now: the one to kill, so that leadership moves."""
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def leader() -> tuple[int] | None:   # a node's metadata may not list a topic's new partitions yet (node 0 is falsy)
        partitions = admin.list_topics(topic, timeout=30).topics[topic].partitions
        return (partitions[partition].leader,) if partition in partitions and partitions[partition].leader >= 0 else None
    return wait_until(leader, 60, 0.2, f"a leader of {topic}[{partition}] in the metadata")[0]
