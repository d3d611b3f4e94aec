"""encode_batch, the batches the broker writes itself (HTTP produce, UDP ingest, internal topics),
against kafka-python's DefaultRecordBatchBuilder on the same records."""
from __future__ import annotations

import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from headwater.records import Record, encode_batch

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
