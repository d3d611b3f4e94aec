"""The broker's murmur2 (where the HTTP API and UDP ingest put keyed records) against kafka-python's
(over the wire against librdkafka's: tests/http/test_http_api.py)."""
from __future__ import annotations

import random

from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from headwater.broker.partitioner import murmur2


def test_murmur2_is_kafkas():
    rng = random.Random(7)
    for key in [rng.randbytes(rng.randrange(40)) for _ in range(2000)] + [b"", b"key-42", "ключ".encode()]:
        assert murmur2(key) & 0x7FFFFFFF == kafka_python_murmur2(key) & 0x7FFFFFFF, key
