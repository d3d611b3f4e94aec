"""encode_batch, the batches the broker writes itself (HTTP produce, UDP ingest, internal topics),
against kafka-python's DefaultRecordBatchBuilder on the same records."""
from __future__ import annotations

import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from headwater.records import Compression, Record, decode_records, encode_batch
from headwater.records.encoding import _compiled, _walked

LEADER_EPOCH = slice(12, 16)  # kafka-python writes 0 there, a broker's unassigned epoch is -1 (not under the CRC)


def _random_records(rng: random.Random) -> list[Record]:
    def nullable(size: int) -> bytes | None:
        return None if rng.random() < 0.2 else rng.randbytes(size)
    start = rng.choice([0, 1_700_000_000_000])
    return [Record(offset, start + rng.choice([0, 1, 70, 100_000]) * offset, nullable(rng.choice([0, 5, 200, 9000])),
                   nullable(rng.choice([0, 1, 63, 64, 8191, 8192, 20000])),
                   [(rng.choice(["h", "é" * 3, "trace-id"]), nullable(rng.randrange(20)))
                    for _ in range(rng.randrange(3))])
            for offset in range(rng.randrange(1, 40))]


@pytest.mark.parametrize("seed", range(20))
def test_batches_match_kafka_pythons_builder(seed):
    records = _random_records(random.Random(seed))
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    for r in records:
        builder.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    expected, got = bytes(builder.build()), encode_batch(records)
    assert got[LEADER_EPOCH] == (-1).to_bytes(4, "big", signed=True)
    def outside_the_epoch(batch: bytes) -> bytes:
        return batch[:LEADER_EPOCH.start] + batch[LEADER_EPOCH.stop:]
    assert outside_the_epoch(got) == outside_the_epoch(expected)


@pytest.mark.parametrize("seed", range(20))
def test_the_compiled_builder_and_the_walk_write_the_same_bytes(seed):
    """encode_batch takes aiokafka's compiled builder when it can; the Python walk it falls back to
    (other codecs, a base offset, bytes-like fields) writes the same bytes for the same records."""
    records = _random_records(random.Random(seed))
    base_ts = min(r.timestamp for r in records)
    walked = _walked(records, 0, base_ts, Compression.NONE, 7, 1, 3, 0)
    assert _compiled(records, 7, 1, 3) == walked
    assert encode_batch(records, producer_id=7, producer_epoch=1, base_sequence=3) == walked
    as_bytearrays = [Record(r.offset, r.timestamp, r.key and bytearray(r.key), r.value, r.headers) for r in records]
    assert encode_batch(as_bytearrays, producer_id=7, producer_epoch=1, base_sequence=3) == walked


def test_a_batch_whose_first_record_is_not_the_earliest_keeps_the_least_as_its_base():
    records = [Record(0, 50, b"k", b"late"), Record(1, 10, None, b"early")]
    header, decoded = decode_records(encode_batch(records))
    assert (header.base_timestamp, header.max_timestamp) == (10, 50)
    assert decoded == records


def test_is_compressed_reads_each_batchs_codec_until_bad_framing():
    """``is_compressed`` reads two header fields of each batch (every produce request asks it);
    the answer is the full headers' (plain Python over read_header), framing faults included."""
    from headwater.records.layout import HEADER_SIZE, MIN_BATCH_LENGTH, is_compressed, read_header

    def by_headers(buf: bytes) -> bool:
        pos = 0
        while pos + HEADER_SIZE <= len(buf):
            header = read_header(buf, pos)
            if header.attributes & 0x07:
                return True
            if header.batch_length < MIN_BATCH_LENGTH:
                return False
            pos += 12 + header.batch_length
        return False

    records = [Record(0, 1_700_000_000_000, b"k", b"v" * 50)]
    plain, zstd = encode_batch(records), encode_batch(records, compression=Compression.ZSTD)
    short = bytearray(plain)
    short[8:12] = (MIN_BATCH_LENGTH - 1).to_bytes(4, "big")   # a batch length below the header's
    cases = [b"", plain, zstd, plain * 3, plain + zstd, zstd + plain, plain[:HEADER_SIZE - 1],
             plain + zstd[:HEADER_SIZE], plain + zstd[:HEADER_SIZE - 1], bytes(short) + zstd]
    answers = [is_compressed(case) for case in cases]
    assert answers == [by_headers(case) for case in cases]
    assert answers == [False, False, True, False, True, True, False, True, False, False]
