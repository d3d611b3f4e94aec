"""Every client the issue names round-trips data byte for byte through the broker, with every codec."""
import json

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.clients import (CODECS, confluent_consume, confluent_produce, kafka_python_consume, kafka_python_produce,
                      kcat, sample_messages)


def create_topic(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def by_position(rows):
    return sorted(rows, key=lambda r: (r[0], r[1]))


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_kafka_round_trip(broker, codec):
    create_topic(broker.bootstrap, "orders", 4)
    messages = sample_messages(2000)
    delivered = confluent_produce(broker.bootstrap, "orders", messages, **{"compression.type": codec,
                                                                          "enable.idempotence": True})
    consumed = confluent_consume(broker.bootstrap, "orders", range(4), len(messages))
    assert by_position(consumed) == by_position(delivered)
    # What was sent is what was delivered: the delivery reports carry the producer's own bytes.
    assert [(k, v) for _, _, k, v, _ in delivered] == [(k, v) for k, v, _ in messages]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_round_trip(broker, codec):
    messages = sample_messages(1500)
    compression = None if codec == "none" else codec
    delivered = kafka_python_produce(broker.bootstrap, "payments", messages, compression_type=compression)
    consumed = kafka_python_consume(broker.bootstrap, "payments", range(3), len(messages))
    assert by_position(consumed) == by_position(delivered)
    expected = {(k, v, tuple(h)) for k, v, h in messages}
    assert {(k, v, tuple(h)) for _, _, k, v, h in consumed} == expected


def test_clients_read_each_others_data(broker):
    """confluent-kafka writes, kafka-python reads, and the other way round."""
    first = confluent_produce(broker.bootstrap, "mixed", sample_messages(300), **{"compression.type": "lz4"})
    second = kafka_python_produce(broker.bootstrap, "mixed", sample_messages(300), compression_type="zstd")
    assert by_position(kafka_python_consume(broker.bootstrap, "mixed", range(3), 600)) == by_position(first + second)
    assert by_position(confluent_consume(broker.bootstrap, "mixed", range(3), 600)) == by_position(first + second)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_consume(broker, codec):
    lines = [f"user-{i % 5}:event number {i}" for i in range(200)]
    kcat("-b", broker.bootstrap, "-P", "-t", "clicks", "-K:", "-z", codec, "-H", "source=kcat", "-H", "v=1",
         input="\n".join(lines).encode() + b"\n")
    out = kcat("-b", broker.bootstrap, "-C", "-t", "clicks", "-o", "beginning", "-e", "-q",
               "-f", "%p|%o|%k|%s|%h\n").decode().splitlines()
    rows = [line.split("|") for line in out]
    assert sorted(f"{k}:{v}" for _, _, k, v, _ in rows) == sorted(lines)
    assert all(h == "source=kcat,v=1" for *_, h in rows)
    for p in {r[0] for r in rows}:  # offsets are contiguous from 0 within each partition
        assert sorted(int(r[1]) for r in rows if r[0] == p) == list(range(sum(r[0] == p for r in rows)))
    # a key always lands in the same partition
    partitions_of = {}
    for p, _, k, _, _ in rows:
        partitions_of.setdefault(k, set()).add(p)
    assert all(len(ps) == 1 for ps in partitions_of.values())


def test_kcat_metadata(broker):
    create_topic(broker.bootstrap, "inventory", 5)
    meta = json.loads(kcat("-b", broker.bootstrap, "-L", "-J"))
    assert [b["name"] for b in meta["brokers"]] == [broker.bootstrap]
    topic = next(t for t in meta["topics"] if t["topic"] == "inventory")
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(5))
    assert all(p["leader"] == 0 for p in topic["partitions"])


def test_kcat_reads_confluent_data_with_keys_and_headers(broker):
    delivered = confluent_produce(broker.bootstrap, "audit", [(b"k1", b"v1", [("a", b"1")]), (b"k2", b"v2", [])],
                                  **{"compression.type": "snappy"})
    out = kcat("-b", broker.bootstrap, "-C", "-t", "audit", "-o", "beginning", "-e", "-q",
               "-f", "%k=%s;%h\n").decode()
    assert sorted(out.splitlines()) == ["k1=v1;a=1", "k2=v2;"]
    assert len(delivered) == 2
