"""Where a keyed record goes: Kafka's default partitioner (murmur2 of the key bytes), so records
written by the broker itself (UDP ingest, the HTTP API) land where a Java or librdkafka
producer using murmur2 would put them."""
from __future__ import annotations

import itertools

from kafka.partitioner.default import murmur2

_round_robin = itertools.count()


def partition_for(key: bytes | None, partitions: int) -> int:
    """murmur2 for a key; records without a key take the partitions in turn."""
    if key is None:
        return next(_round_robin) % partitions
    return (murmur2(key) & 0x7FFFFFFF) % partitions
