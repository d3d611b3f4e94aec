"""Fetched record batches become the Spark source's columns, record for record as the
batches were built (plain Python over the same input is the ground truth): compression,
headers and nulls, log-append time, compaction gaps, a batch cut off at the end of the
fetch, control batches, aborted transactions under read_committed, and malformed bytes."""

from datetime import datetime, timezone

import pytest

from headwater.records import Compression, CorruptRecordError, Record, encode_batch
from headwater.records.control import encode_marker
from headwater.records.layout import ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, HEADER_SIZE
from headwater.spark.record_columns import FetchedRecords, arrow_schema

T0 = 1_700_000_000_000


def records(first: int, n: int, step: int = 1) -> list[Record]:
    return [Record(o, T0 + o * 7, None if o % 4 == 0 else b"k%d" % o, None if o % 5 == 0 else b"v" * (o % 300),
                   [("h%d" % i, None if i == 1 else b"x" * i) for i in range(o % 3)])
            for o in range(first, first + n * step, step)]


def want(rs: list[Record], log_append: int | None = None) -> list[dict]:
    return [{"key": r.key, "value": r.value, "topic": "t", "partition": 2, "offset": r.offset,
             "timestamp": datetime.fromtimestamp((log_append or r.timestamp) / 1000, timezone.utc),
             "timestampType": 1 if log_append else 0,
             "headers": [{"key": k, "value": v} for k, v in r.headers] or None} for r in rs]


def rows(fetched: FetchedRecords, start: int = 0, end: int = 1 << 62) -> list[dict]:
    batch = fetched.columns("t", 2, start, end)
    assert batch.schema == arrow_schema(fetched.with_headers)
    return batch.to_pylist()


@pytest.mark.parametrize("codec", list(Compression), ids=[c.name.lower() for c in Compression])
def test_batches_of_every_codec_read_as_built(codec):
    first, second = records(0, 150), records(300, 40, step=3)  # the second has compaction gaps
    raw = encode_batch(first, compression=codec) + encode_batch(second, base_offset=300, compression=codec)
    fetched = FetchedRecords(raw, with_headers=True)
    assert rows(fetched) == want(first + second)
    assert fetched.next_offset == second[-1].offset + 1
    assert rows(fetched, 10, 305) == want(first[10:] + second[:2])
    assert fetched.columns("t", 2, 150, 300) is None
    no_headers = FetchedRecords(raw, with_headers=False).columns("t", 2, 0, 1 << 62).to_pylist()
    assert no_headers == [{k: v for k, v in row.items() if k != "headers"} for row in want(first + second)]


def test_log_append_time_and_a_batch_cut_off_by_the_fetch():
    stamped = encode_batch(records(0, 10), attributes=ATTR_LOG_APPEND_TIME)
    stamped = stamped[:35] + (T0 + 999).to_bytes(8, "big") + stamped[43:]  # max timestamp: the append time
    cut = encode_batch(records(10, 10), base_offset=10)
    fetched = FetchedRecords(stamped + cut[:len(cut) - 3], with_headers=True)
    assert rows(fetched) == want(records(0, 10), log_append=T0 + 999)
    assert fetched.next_offset == 10


def test_many_small_batches_grow_the_vectors():
    rs = records(0, 5000)
    fetched = FetchedRecords(b"".join(encode_batch([r], base_offset=r.offset) for r in rs), with_headers=True)
    assert rows(fetched) == want(rs)


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    return offset.to_bytes(8, "big") + encode_marker(producer_id, 0, commit, 0, T0)[8:]  # the CRC skips the offset


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=["uncompressed", "zstd"])
def test_control_batches_and_aborted_transactions(codec):
    committed, aborted, plain = records(0, 5), records(6, 5), records(12, 5)
    raw = (encode_batch(committed, producer_id=7, attributes=ATTR_TRANSACTIONAL, compression=codec)
           + marker(5, 7, commit=True)
           + encode_batch(aborted, base_offset=6, producer_id=8, attributes=ATTR_TRANSACTIONAL, compression=codec)
           + marker(11, 8, commit=False)
           + encode_batch(plain, base_offset=12, compression=codec))
    assert rows(FetchedRecords(raw, with_headers=True)) == want(committed + aborted + plain)  # read_uncommitted
    fetched = FetchedRecords(raw, with_headers=True, aborted=[(8, 6)])
    assert rows(fetched) == want(committed + plain)
    assert fetched.next_offset == 17
    # A producer's later transaction, after its abort marker, is read again.
    again = encode_batch(records(17, 2), base_offset=17, producer_id=8, attributes=ATTR_TRANSACTIONAL,
                         compression=codec)
    assert rows(FetchedRecords(raw + again, with_headers=True, aborted=[(8, 6)])) == want(committed + plain + records(17, 2))


def test_a_marker_batch_emptied_by_compaction_ends_nothing():
    emptied = bytearray(marker(5, 8, commit=False))
    emptied[8:12] = (HEADER_SIZE - 12).to_bytes(4, "big")  # batch length: the header alone
    emptied[57:61] = (0).to_bytes(4, "big")  # no records
    aborted = encode_batch(records(6, 3), base_offset=6, producer_id=8, attributes=ATTR_TRANSACTIONAL)
    fetched = FetchedRecords(bytes(emptied[:HEADER_SIZE]) + aborted, with_headers=False, aborted=[(8, 0)])
    assert fetched.columns("t", 2, 0, 100) is None  # the producer's transaction is still aborted
    assert fetched.next_offset == 9


def test_a_header_key_that_is_not_utf8_is_replaced():
    raw = bytearray(encode_batch([Record(0, T0, b"k", b"v", [("ab", b"x")])]))
    at = raw.index(b"ab")
    raw[at:at + 2] = b"a\xff"
    assert rows(FetchedRecords(bytes(raw), with_headers=True))[0]["headers"] == [{"key": "a\ufffd", "value": b"x"}]


@pytest.mark.parametrize("damage", ["magic", "record length", "huge record length", "count", "negative batch length",
                                    "cut off"])
def test_malformed_batches_are_refused(damage):
    raw = bytearray(encode_batch(records(0, 20)))
    if damage == "magic":
        raw[16] = 1
    elif damage == "record length":
        raw[61] = 0x7E  # the first record's length: 63 bytes, more than it holds
    elif damage == "huge record length":
        raw[61:62] = b"\xfe\xff\xff\xff\x0f"  # 2**31 - 1 bytes, far past the batch
    elif damage == "count":
        raw[57:61] = (10 ** 6).to_bytes(4, "big")
    elif damage == "negative batch length":
        raw[8:12] = (-5).to_bytes(4, "big", signed=True)
    else:
        raw = raw[:100]  # no whole batch in the fetch
    with pytest.raises(CorruptRecordError):
        FetchedRecords(bytes(raw), with_headers=True)
