"""Mutations of valid requests: what a hostile or broken client sends.

Byte-level mutations (bit flips, truncations, length lies, huge and negative counts, random
API keys and versions) know nothing of the schema; field-level ones decode the seed, change
one field (a null where none is allowed, an extreme integer, a hostile record batch) and
encode it again, so they reach the handlers behind a parser that would refuse garbage.
"""
from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass

import crc32c

from headwater.fuzzing.corpus import HOSTILE_TOPIC, Seed, TIMESTAMP, field_paths, non_nullable_paths, set_path
from headwater.records import Compression, Record, encode_batch, read_header
from headwater.records.layout import ATTR_COMPRESSION_MASK, ATTR_CONTROL, CRC_START, HEADER, HEADER_SIZE, LOG_OVERHEAD

_SIZE = struct.Struct(">i")
# Extreme values per integer width: the edges, -1, and values that are large but plausible.
EXTREMES = {
    "int8": (-128, -1, 0, 1, 127),
    "int16": (-32768, -1, 0, 32767, 255),
    "uint16": (0, 65535),
    "int32": (-2**31, -1, 0, 2**31 - 1, 2**30, 65536, 10_000),
    "int64": (-2**63, -1, -2, 0, 2**63 - 1, 2**53, 2**32),
}


@dataclass(frozen=True)
class Mutant:
    """A frame as sent on the wire (size prefix included), how it was made, whether an answer
    may come (a size prefix promising more bytes than follow never gets one), and whether it
    leaves the connection out of step (bytes after the frame the size prefix announced)."""
    wire: bytes
    mutation: str
    seed: str
    answerable: bool = True
    desyncs: bool = False


def framed(frame: bytes) -> bytes:
    return _SIZE.pack(len(frame)) + frame


# --- byte level -----------------------------------------------------------------------------

def bit_flips(rng: random.Random, seed: Seed) -> bytes:
    frame = bytearray(seed.frame)
    for _ in range(rng.choice((1, 1, 2, 4, 8))):
        frame[rng.randrange(len(frame))] ^= 1 << rng.randrange(8)
    return framed(bytes(frame))


def truncation(rng: random.Random, seed: Seed) -> bytes:
    return framed(seed.frame[:rng.randrange(len(seed.frame))])


def extreme_count(rng: random.Random, seed: Seed) -> bytes:
    """An int32, int16 or varint somewhere in the body overwritten with an extreme: where it
    lands on an array count or a string length, a huge or negative count."""
    frame = bytearray(seed.frame)
    pos = rng.randrange(8, len(frame))
    width = rng.choice(("int32", "int16", "varint"))
    if width == "varint":
        value = rng.choice((b"\x00", b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", b"\x80"))
        frame[pos:pos + len(value)] = value
    else:
        fmt = ">i" if width == "int32" else ">h"
        value = rng.choice(EXTREMES[width])
        frame[pos:pos + struct.calcsize(fmt)] = struct.pack(fmt, value)
    return framed(bytes(frame))


def api_key_and_version(rng: random.Random, seed: Seed) -> bytes:
    frame = bytearray(seed.frame)
    key = rng.choice((seed.api.key, rng.randrange(-2, 90), 32767))
    version = rng.choice((rng.randrange(-2, 20), 32767, -32768, seed.version))
    struct.pack_into(">hh", frame, 0, key, version)
    return framed(bytes(frame))


def short_size_prefix(rng: random.Random, seed: Seed) -> bytes:
    """The size prefix promises fewer bytes than follow: the rest is read as the next frame."""
    return _SIZE.pack(rng.randrange(len(seed.frame))) + seed.frame


def garbage(rng: random.Random, seed: Seed) -> bytes:
    return framed(rng.randbytes(rng.randrange(64)))


# --- field level ------------------------------------------------------------------------------

def null_field(rng: random.Random, seed: Seed) -> bytes | None:
    paths = non_nullable_paths(seed)
    if not paths:
        return None
    request = seed.decode()
    set_path(request, rng.choice(paths), None)
    return framed(bytes(request.encode(header=True)))


def extreme_integer(rng: random.Random, seed: Seed) -> bytes | None:
    """One integer field (a partition, an offset, a size, a timeout, a count) set to an extreme."""
    ints = [(path, field.type_str) for path, field in field_paths(seed.api.request._struct, seed.request, seed.version)
            if field.type_str in EXTREMES]
    if not ints:
        return None
    path, kind = rng.choice(ints)
    request = seed.decode()
    set_path(request, path, rng.choice(EXTREMES[kind]))
    return framed(bytes(request.encode(header=True)))


def hostile_records(rng: random.Random, seed: Seed, topic: str) -> bytes | None:
    """A Produce whose record batch is broken in one of the ways a log validator must catch."""
    paths = [path for path, field in field_paths(seed.api.request._struct, seed.request, seed.version)
             if field.type_str == "records"]
    if not paths:
        return None
    request = seed.decode()
    set_path(request, paths[0], hostile_batch(rng))
    set_path(request, paths[0][:-2] + ("name",), topic)
    return framed(bytes(request.encode(header=True)))


# --- record batches -------------------------------------------------------------------------

def _batch(rng: random.Random, codec: Compression | None = None, count: int | None = None) -> bytearray:
    count = count or rng.randrange(1, 6)
    codec = rng.choice(list(Compression)) if codec is None else codec
    return bytearray(encode_batch([Record(i, TIMESTAMP + i, b"k%d" % rng.randrange(10), rng.randbytes(rng.randrange(40)))
                                   for i in range(count)], compression=codec))


def _reseal(batch: bytearray, **fields) -> bytearray:
    """Change header fields and recompute the CRC, so only the change itself is wrong."""
    header = dataclasses.replace(read_header(batch), **fields)
    HEADER.pack_into(batch, 0, *dataclasses.astuple(header))
    crc = crc32c.crc32c(memoryview(batch)[CRC_START:])
    HEADER.pack_into(batch, 0, *dataclasses.astuple(dataclasses.replace(header, crc=crc)))
    return batch


def _reseal_body(batch: bytearray, body: bytes) -> bytearray:
    out = bytearray(batch[:HEADER_SIZE]) + body
    return _reseal(out, batch_length=len(out) - LOG_OVERHEAD)


def _bad_crc(rng, batch):
    batch[rng.randrange(CRC_START, len(batch))] ^= 1 << rng.randrange(8)
    return batch


def _bad_length(rng, batch):
    header = read_header(batch)
    return _reseal(batch, batch_length=rng.choice((-1, 0, 10, header.batch_length + 1, header.batch_length - 1, 2**31 - 1)))


def _bad_varints(rng, batch):
    plain = _batch(rng, Compression.NONE)
    body = bytearray(plain[HEADER_SIZE:])
    pos = rng.randrange(len(body))
    body[pos:pos + 10] = rng.choice((b"\xff" * 10, b"\x80" * 10, b"\x7f", b"\x01"))
    return _reseal_body(plain, bytes(body))


def _bad_codec(rng, batch):
    header = read_header(batch)
    return _reseal(batch, attributes=(header.attributes & ~ATTR_COMPRESSION_MASK) | rng.choice((5, 6, 7)))


def _corrupt_compressed(rng, batch):
    packed = _batch(rng, rng.choice((Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)))
    body = bytearray(packed[HEADER_SIZE:])
    for _ in range(rng.randrange(1, 4)):
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)
    if rng.random() < 0.3:
        body = body[:rng.randrange(len(body))]
    return _reseal_body(packed, bytes(body))


def _count_lie(rng, batch):
    header = read_header(batch)
    return _reseal(batch, records_count=rng.choice((-1, 0, header.records_count + 1, 2**31 - 1)),
                   last_offset_delta=rng.choice((header.last_offset_delta, -1, 2**31 - 1)))


def _control_garbage(rng, batch):
    header = read_header(batch)
    garbled = _reseal_body(batch, rng.randbytes(rng.randrange(1, 40)))
    return _reseal(garbled, attributes=header.attributes & ~ATTR_COMPRESSION_MASK | ATTR_CONTROL)


def _bad_magic(rng, batch):
    return _reseal(batch, magic=rng.choice((0, 1, 3, 255)))


def _partial_tail(rng, batch):
    return batch + _batch(rng)[:rng.randrange(1, HEADER_SIZE + 8)]


def _timestamps(rng, batch):
    return _reseal(batch, base_timestamp=rng.choice(EXTREMES["int64"]), max_timestamp=rng.choice(EXTREMES["int64"]))


def _small_bomb(rng, batch):
    """1 MB of zeros compressed to a few hundred bytes: more than a record should expand to."""
    return bytearray(encode_batch([Record(0, TIMESTAMP, b"k", bytes(1 << 20))], compression=Compression.ZSTD))


BATCH_MUTATIONS: list[Callable] = [_bad_crc, _bad_length, _bad_varints, _bad_codec, _corrupt_compressed, _count_lie,
                                   _control_garbage, _bad_magic, _partial_tail, _timestamps, _small_bomb]


def hostile_batch(rng: random.Random) -> bytes:
    return bytes(rng.choice(BATCH_MUTATIONS)(rng, _batch(rng)))


# --- choosing ---------------------------------------------------------------------------------

MUTATIONS: dict[str, Callable[[random.Random, Seed], bytes | None]] = {
    "bit flips": bit_flips, "truncation": truncation, "extreme count": extreme_count,
    "api key and version": api_key_and_version, "short size prefix": short_size_prefix, "garbage": garbage,
    "null field": null_field, "extreme integer": extreme_integer,
}


def mutants(rng: random.Random, seeds: list[Seed], hostile_topic: str = HOSTILE_TOPIC):
    """An endless stream of Mutants: mostly mutated seeds, some valid ones, a few length lies,
    hostile record batches produced to ``hostile_topic``."""
    produce = [s for s in seeds if any(f.type_str == "records" for _, f in
                                       field_paths(s.api.request._struct, s.request, s.version))]
    while True:
        roll = rng.random()
        if roll < 0.08:
            seed = rng.choice(seeds)
            yield Mutant(framed(seed.frame), "none (valid)", seed.name)
        elif roll < 0.10:  # promises more than it sends: the broker waits, the client gives up
            seed = rng.choice(seeds)
            yield Mutant(_SIZE.pack(len(seed.frame) + rng.randrange(1, 1 << 20)) + seed.frame, "long size prefix",
                         seed.name, answerable=False, desyncs=True)
        elif roll < 0.25:
            seed = rng.choice(produce)
            yield Mutant(hostile_records(rng, seed, hostile_topic), "hostile records", seed.name)
        else:
            seed = rng.choice(seeds)
            name = rng.choice(list(MUTATIONS))
            wire = MUTATIONS[name](rng, seed)
            if wire is not None:
                yield Mutant(wire, name, seed.name, desyncs=name == "short size prefix")
