"""A known share-group workload for the console and /metrics tests: records on two
partitions, a member that accepts most and rejects every third into a dead-letter topic, and
the delivery state that must follow (computed here in plain Python)."""
from __future__ import annotations

import time

from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

TOPIC, GROUP, DLQ = "jobs", "workers", "jobs-dlq"
PER_PARTITION = {0: 6, 1: 4}     # records produced to each partition


def rejected(partition: int) -> int:
    return sum(1 for i in range(PER_PARTITION[partition]) if is_poison(i))


def is_poison(i: int) -> bool:
    return i % 3 == 2


def share_consumer(bootstrap: str) -> ShareConsumer:
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([TOPIC])
    return consumer


def run(bootstrap: str) -> ShareConsumer:
    """Every record processed once (accepted, or rejected into DLQ); returns the member, still in the group."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(TOPIC, len(PER_PARTITION)), NewTopic(DLQ, 1)]).values():
        future.result(30)
    configs = {"share.auto.offset.reset": "earliest", "errors.deadletterqueue.topic.name": DLQ}
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in configs.items()]
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, GROUP,
                                                                  incremental_configs=entries)]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, count in PER_PARTITION.items():
        for i in range(count):
            producer.produce(TOPIC, key=f"job-{partition}-{i}".encode(), value=str(i).encode(), partition=partition)
    producer.flush(30)
    consumer = share_consumer(bootstrap)
    done = 0
    deadline = time.monotonic() + 60
    while done < sum(PER_PARTITION.values()):
        assert time.monotonic() < deadline, f"only {done} records delivered"
        for m in consumer.poll(0.3):
            if not m.error():
                kind = AcknowledgeType.REJECT if is_poison(int(m.value())) else AcknowledgeType.ACCEPT
                consumer.acknowledge(m, kind)
                done += 1
        consumer.commit_sync()
    return consumer
