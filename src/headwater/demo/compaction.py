"""Chapter: log compaction. A compacted `customers` topic takes many updates per customer
(and a few deletions); once the log cleaner has run, replaying it from the beginning
rebuilds the current state of every customer from one record each, on a fraction of the disk."""
from __future__ import annotations

import json
import random
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic
from rich.table import Table

from headwater.cli.topics import partition_sizes

TOPIC, CUSTOMERS, UPDATES = "customers", 200, 5000
SEGMENT_MS = 1000
# min.compaction.lag.ms holds the cleaner off until the log as written has been measured.
CONFIGS = {"cleanup.policy": "compact", "segment.bytes": "65536", "segment.ms": str(SEGMENT_MS),
           "min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "0", "min.compaction.lag.ms": "3600000"}


def _replay(bootstrap: str) -> list:
    """Every record of the topic, read from its log start offset."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-compaction", "enable.auto.commit": False})
    low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    consumer.assign([TopicPartition(TOPIC, 0, low)])
    records = []
    while low < high:
        for msg in consumer.consume(1000, 5.0):
            low = msg.offset() + 1
            records.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    return records


def _state(records) -> dict:
    """The table the log describes: the last value of each key, deletions applied."""
    state = {}
    for _, key, value in records:
        if value is None:
            state.pop(key, None)
        else:
            state[key] = value
    return state


def _row(label: str, records, size: int) -> tuple:
    return label, f"{len(records):,}", f"{len({key for _, key, _ in records}):,}", f"{size:,}"


def run(bootstrap: str, console) -> None:
    console.rule("[bold]Log compaction: the latest value of every customer")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, config=CONFIGS)])[TOPIC].result(30)
    rng = random.Random(7)
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": "zstd", "linger.ms": 20})
    for version in range(UPDATES):
        customer = rng.randrange(CUSTOMERS)
        value = {"id": customer, "city": rng.choice(["Lyon", "Oslo", "Pune", "Lima"]), "version": version}
        producer.produce(TOPIC, key=f"customer-{customer:03d}", value=json.dumps(value))
        producer.poll(0)
    for customer in range(0, CUSTOMERS, 40):
        producer.produce(TOPIC, key=f"customer-{customer:03d}", value=None)  # a tombstone: the customer left
    producer.flush(30)
    # The active segment is never cleaned: a sign-up after segment.ms closes it.
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    producer.produce(TOPIC, key=f"customer-{CUSTOMERS:03d}", value=json.dumps({"id": CUSTOMERS, "city": "Oslo",
                                                                                "version": UPDATES}))
    producer.flush(30)
    written = _replay(bootstrap)
    before = _row("as written", written, partition_sizes(bootstrap, TOPIC, [0])[0])
    console.print(f"{len(written):,} updates and deletions of {CUSTOMERS} customers written to [bold]{TOPIC}[/] "
                  f"(cleanup.policy=compact); min.compaction.lag.ms=0 lets the log cleaner at them...")
    lag = ConfigResource("topic", TOPIC, incremental_configs=[
        ConfigEntry("min.compaction.lag.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([lag])[lag].result(30)

    deadline = time.monotonic() + 60
    while True:
        cleaned = _replay(bootstrap)
        if len(cleaned) == len({key for _, key, _ in cleaned}) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    table = Table(title=f"{TOPIC}: replay from the beginning")
    for column in ("log", "records", "keys", "bytes on disk"):
        table.add_column(column, justify="right")
    table.add_row(*before)
    table.add_row(*_row("after cleaning", cleaned, partition_sizes(bootstrap, TOPIC, [0])[0]))
    console.print(table)
    last_offset = {key: offset for offset, key, _ in written}
    kept_offsets = all(offset == last_offset[key] for offset, key, _ in cleaned)
    console.print(f"replay after cleaning rebuilds the same {len(_state(cleaned))} customers as the full history: "
                  f"[bold]{_state(cleaned) == _state(written)}[/]; each kept record at its original offset: "
                  f"[bold]{kept_offsets}[/]; deleted customers gone: "
                  f"[bold]{all(value is not None for _, _, value in cleaned)}[/]")
