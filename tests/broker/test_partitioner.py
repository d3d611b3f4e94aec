"""The broker's murmur2 (where the HTTP API and UDP ingest put keyed records) against kafka-python's
(over the wire against librdkafka's: tests/http/test_http_api.py)."""
from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from headwater.broker.partitioner import keyed_partitions, murmur2


def test_murmur2_is_kafkas():
    rng = random.Random(7)
    for key in [rng.randbytes(rng.randrange(40)) for _ in range(2000)] + [b"", b"key-42", "ключ".encode()]:
        assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF, key


def test_many_keys_at_once_go_where_kafka_puts_each():
    rng = random.Random(11)
    for partitions in (1, 3, 4, 1000):
        for keys in ([rng.randbytes(rng.randrange(40)) for _ in range(500)],     # mixed lengths, tails 0-3
                     [f"key-{i}".encode() for i in range(100)],                 # one length
                     [b"", b"a", b"ab", b"abc", b"abcd", b"abcde", b"\xff" * 7, b"\x80\x00\x01"],
                     [rng.randbytes(300)] + [b"k"] * 9,                           # a long one: key by key
                     [b"x", b"yy"]):                                              # few: key by key
            expected = [(kafka_python_murmur2(key) & 0x7FFFFFFF) % partitions for key in keys]
            assert keyed_partitions(keys, partitions) == expected
