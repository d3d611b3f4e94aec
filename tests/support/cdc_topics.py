"""Reading change topics back with a real confluent-kafka Consumer (assign, from the beginning)."""
import json

from confluent_kafka import Consumer, TopicPartition

from headwater.testing import wait_until


def read_topic(bootstrap, topic, json_keys=True, json_values=True):
    """Every record of every partition, as dicts; partition order kept, partitions concatenated
    (keys and values as bytes where not JSON)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cdc-test-reader", "enable.auto.commit": False})
    try:
        meta = consumer.list_topics(topic, timeout=60).topics[topic]
        records = []
        for partition in sorted(meta.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=60)
            if high <= low:
                continue
            consumer.assign([TopicPartition(topic, partition, low)])
            offset = low
            while offset < high:
                msg = consumer.poll(5)
                if msg is None or msg.error():
                    continue
                offset = msg.offset() + 1
                records.append({"partition": partition, "offset": msg.offset(),
                                "key": json.loads(msg.key()) if json_keys and msg.key() is not None else msg.key(),
                                "value": json.loads(msg.value()) if json_values and msg.value() is not None
                                else msg.value()})
        return records
    finally:
        consumer.close()


def changes(records):
    """Only the change events (no tombstones), in LSN order (the source's commit order here).
    A key change is a delete and a create at one LSN, on two partitions: the delete goes first."""
    return sorted((r["value"] for r in records if r["value"] is not None),
                  key=lambda v: (v["source"]["lsn"], v["op"] != "d"))


def replay(records, key_field="id"):
    """Rebuild a table from its change topic: per key, drop events at or below the last applied
    LSN (redeliveries after a crash), apply the rest. Returns {key: row} and {key: [(op, row)]}."""
    table, history, last = {}, {}, {}
    for r in records:
        value = r["value"]
        if value is None:
            continue
        if value["op"] == "t":
            table.clear()
            continue
        key = r["key"][key_field]
        # A change may carry the snapshot's own LSN (the first record after the consistent point),
        # so a read sorts before a change at the same LSN. Redelivered reads are dropped too.
        position = (value["source"]["lsn"], value["op"] != "r")
        if position <= last.get(key, (-1, False)):
            continue
        last[key] = position
        history.setdefault(key, []).append((value["op"], value["after"] or value["before"]))
        if value["op"] == "d":
            table.pop(key, None)
        else:
            table[key] = value["after"]
    return table, history


def wait_for(predicate, timeout=120, interval=0.2, what="condition"):
    return wait_until(predicate, timeout, interval, what)
