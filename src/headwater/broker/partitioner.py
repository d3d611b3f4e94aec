"""Where a keyed record goes: Kafka's default partitioner (murmur2 of the key bytes), so records
written by the broker itself (UDP ingest, the HTTP API) land where a Java or librdkafka
producer using murmur2 would put them."""
from __future__ import annotations

import itertools
import struct

import numpy as np

_round_robin = itertools.count()
_M, _SEED, _MASK = 0x5BD1E995, 0x9747B28C, 0xFFFFFFFF
_M32, _SEED32 = np.uint32(_M), np.uint32(_SEED)
VECTOR_MIN_KEYS, VECTOR_MAX_KEY = 8, 256  # fewer or longer keys: one at a time is cheaper


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


def keyed_partitions(keys: list[bytes], partitions: int) -> list[int]:
    """``partition_for`` of many keys at once (a REST request's): murmur2 as numpy vectors, a
    column per 4-byte block, 33 µs for 100 short keys against 110 one by one."""
    if len(keys) < VECTOR_MIN_KEYS or max(map(len, keys)) > VECTOR_MAX_KEY:
        return [partition_for(key, partitions) for key in keys]
    lengths = np.fromiter(map(len, keys), np.uint32, len(keys))
    width = ((int(lengths.max()) >> 2) + 1) << 2  # each key's blocks and its tail, zero-padded
    blocks = np.frombuffer(b"".join(key.ljust(width, b"\0") for key in keys), "<u4").reshape(len(keys), -1)
    counts = lengths >> 2
    h = lengths ^ _SEED32  # uint32 arithmetic wraps as Java's int does
    for j in range(int(counts.max())):
        k = blocks[:, j] * _M32
        k = (k ^ (k >> 24)) * _M32
        h = np.where(counts > j, (h * _M32) ^ k, h)
    tail = blocks[np.arange(len(keys)), counts]  # the last 1-3 bytes, little-endian, zeros after
    h = np.where(lengths & 3, (h ^ tail) * _M32, h)
    h = (h ^ (h >> 13)) * _M32
    h ^= h >> 15
    return ((h & 0x7FFFFFFF) % partitions).tolist()
