"""Where a keyed record goes: Kafka's default partitioner (murmur2 of the key bytes), so records
written by the broker itself (UDP ingest, the HTTP API) land where a Java or librdkafka
producer using murmur2 would put them."""
from __future__ import annotations

import itertools
import struct

_round_robin = itertools.count()
_M, _SEED, _MASK = 0x5BD1E995, 0x9747B28C, 0xFFFFFFFF


def murmur2(key: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit int: the key's 4-byte blocks unpacked in
    one call (little-endian, as Java reads them), then the tail bytes and the final mix."""
    length = len(key)
    h = _SEED ^ length
    blocks = length >> 2
    for k in struct.unpack_from(f"<{blocks}I", key):
        k = (k * _M) & _MASK
        k = ((k ^ (k >> 24)) * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail:
        at = blocks << 2
        if tail == 3:
            h ^= key[at + 2] << 16
        if tail >= 2:
            h ^= key[at + 1] << 8
        h = ((h ^ key[at]) * _M) & _MASK
    h = ((h ^ (h >> 13)) * _M) & _MASK
    return h ^ (h >> 15)


def partition_for(key: bytes | None, partitions: int) -> int:
    """murmur2 for a key; records without a key take the partitions in turn."""
    if key is None:
        return next(_round_robin) % partitions
    return (murmur2(key) & 0x7FFFFFFF) % partitions
