"""Storage engine: appends, reads, segments, indexes, timestamps, recovery, the topic catalog.

Batches are built with kafka-python's DefaultRecordBatchBuilder (an independent encoder)
and checked against plain-Python bookkeeping of what was appended.
"""
import json
import os
import random

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from headwater.log import (InvalidTopicError, Log, LogConfig, LogManager, OffsetOutOfRangeError, TopicExistsError,
                           UnknownTopicError)
from headwater.log.files import SEGMENT_FILES
from headwater.log.segment import RECOVERY_CHUNK, SCAN_CHUNK
from headwater.records import decode_records, iter_batches, read_header

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build_batch(records, codec=0, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    """records: [(key, value, timestamp)] -> one v2 batch (offsets relative, base offset 0)."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=producer_epoch,
                                        base_sequence=base_sequence, batch_size=1 << 24)
    for i, (key, value, ts) in enumerate(records):
        builder.append(i, ts, key, value, [])
    return bytearray(builder.build())


def fill(log, batches, rng, now_ms=None):
    """Append ``batches`` random-sized batches; return the expected [(offset, key, value, ts)]."""
    expected = []
    for _ in range(batches):
        n = rng.randint(1, 20)
        records = [(b"k%d" % rng.randint(0, 50), rng.randbytes(rng.randint(0, 120)), rng.randint(1000, 5000))
                   for _ in range(n)]
        end = log.log_end_offset
        first, last = log.append(build_batch(records), now_ms=now_ms)
        assert first == end
        assert last - first + 1 == n
        expected += [(first + i, k, v, ts) for i, (k, v, ts) in enumerate(records)]
    return expected


def read_all(log, start=0, max_bytes=1 << 20):
    """Every record from ``start`` to the end, read the way a consumer does."""
    out, offset = [], start
    while offset < log.log_end_offset:
        data = log.read(offset, max_bytes)
        assert data, f"no data at {offset} below the end {log.log_end_offset}"
        for pos, header in iter_batches(data):
            assert header.last_offset >= offset
            for r in decode_records(data, pos)[1]:
                if r.offset >= offset:
                    out.append((r.offset, r.key, r.value, r.timestamp))
            offset = header.last_offset + 1
    return out


def test_append_read_round_trip_contiguous_offsets(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=256))
    expected = fill(log, 200, random.Random(1))
    assert [e[0] for e in expected] == list(range(len(expected)))
    assert log.log_end_offset == len(expected)
    assert read_all(log) == expected
    assert read_all(log, max_bytes=1) == expected  # one batch at a time
    assert log.read(log.log_end_offset, 1000) == b""
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


@pytest.mark.parametrize("codec", CODECS)
def test_compressed_batches_stored_as_sent(tmp_path, codec):
    log = Log.open(tmp_path / "t-0", LogConfig())
    batch = build_batch([(b"k", b"value %d" % i * 10, 1000 + i) for i in range(100)], CODECS[codec])
    log.append(build_batch([(None, b"first", 1)]))
    sent = bytes(batch)
    log.append(batch)
    data = log.read(1, 1 << 20)
    assert data[8:] == sent[8:]  # everything but the stamped base offset
    assert read_header(data).base_offset == 1
    assert [r.value for r in decode_records(data)[1]] == [b"value %d" % i * 10 for i in range(100)]


def test_read_from_middle_of_batch_returns_containing_batch(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    for i in range(10):
        log.append(build_batch([(None, b"%d-%d" % (i, j), 1) for j in range(5)]))
    for offset in range(50):
        data = log.read(offset, 1)
        headers = [h for _, h in iter_batches(data)]
        assert len(headers) == 1
        assert headers[0].base_offset == offset - offset % 5


def test_read_respects_max_bytes_with_whole_batches(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=100))
    sizes = []
    for i in range(40):
        batch = build_batch([(None, bytes(random.Random(i).randint(10, 300)), 1)])
        sizes.append(len(batch))
        log.append(batch)
    for start in (0, 7, 20):
        for max_bytes in (1, 500, 1000, 4000):
            data = log.read(start, max_bytes)
            # ground truth: the longest run of whole batches within max_bytes, at least one
            n, total = 0, 0
            while start + n < 40 and (n == 0 or total + sizes[start + n] <= max_bytes):
                total += sizes[start + n]
                n += 1
            assert len(data) == total
            assert len(list(iter_batches(data))) == n


def test_a_consumer_reading_on_starts_where_its_last_read_ended(tmp_path, monkeypatch):
    """Batches of a record or two, as a producer spread over many partitions sends them: dozens lie
    between two index entries. A read from where the last read that reached the end stopped walks
    no batch header (everything since fits), not all those since the last index entry; a reader
    elsewhere in the log still reads what was appended."""
    from headwater.log import segment
    walked = []
    monkeypatch.setattr(segment, "read_header", lambda *a: walked.append(a) or read_header(*a))
    log = Log.open(tmp_path / "t-0", LogConfig())   # index.interval.bytes 4096: ~50 of these batches
    rng, expected, tail = random.Random(7), [], 0
    for _ in range(300):
        records = [(b"k", rng.randbytes(rng.randint(0, 20)), 1000 + len(expected)) for _ in range(rng.randint(1, 2))]
        first, _ = log.append(build_batch(records))
        expected += [(first + i, k, v, ts) for i, (k, v, ts) in enumerate(records)]
        walked.clear()
        assert read_all(log, tail) == expected[tail:]
        assert not walked, f"a read at {tail} walked {len(walked)} batch headers"
        tail = log.log_end_offset
        behind = rng.randrange(tail)   # another consumer, anywhere in the log
        assert read_all(log, behind) == expected[behind:]


def test_a_read_upto_an_offset_stops_before_the_first_batch_at_or_past_it(tmp_path):
    """A read_committed reader's read: whole batches below its last stable offset (``upto``), and
    the offset up to which it has seen every record, checked against the batches appended."""
    rng = random.Random(5)
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=0))
    spans, sizes = [], []          # (base offset, last offset) and size of each batch, in order
    for _ in range(30):
        batch = build_batch([(None, b"v", 1)] * rng.randint(1, 6))
        sizes.append(len(batch))
        spans.append(log.append(batch))
    for _ in range(300):
        i = rng.randrange(len(spans))
        start = rng.randint(*spans[i])
        upto = rng.randint(start + 1, log.log_end_offset)      # a batch base or not: both are cut alike
        max_bytes = rng.choice([1, 100, 1 << 20])
        below = [j for j in range(i, len(spans)) if spans[j][0] < upto]
        fits, total = [], 0                 # the whole batches within max_bytes, at least one
        for j in below:
            if fits and total + sizes[j] > max_bytes:
                break
            fits.append(j)
            total += sizes[j]
        read = log.read_batches(start, max_bytes, upto=upto)
        assert [h.base_offset for _, h in read.batches] == [spans[j][0] for j in fits]
        assert len(read.records) == total and log.read(start, max_bytes, upto=upto) == read.records
        cut = len(fits) == len(below) and below[-1] + 1 < len(spans) and total + sizes[below[-1] + 1] <= max_bytes
        assert read.next_offset == (upto if cut else spans[fits[-1]][1] + 1)
    assert log.read_batches(log.log_end_offset, 100) == (b"", [], log.log_end_offset)


def test_a_read_with_enough_stops_before_the_first_later_batch_at_or_past_it(tmp_path):
    """A share fetch's read: whole batches within max_bytes, none past the first batch that
    starts at or after ``enough``, checked against the batches appended; reads that go on from
    where the last stopped (the segment's remembered read end) as well as random ones."""
    rng = random.Random(7)
    log = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=200))
    spans, sizes = [], []
    for _ in range(40):
        batch = build_batch([(None, b"v", 1)] * rng.randint(1, 6))
        sizes.append(len(batch))
        spans.append(log.append(batch))
    start = 0
    for _ in range(400):
        if rng.random() < 0.3 or start >= log.log_end_offset:
            start = rng.randint(0, log.log_end_offset - 1)
        i = next(j for j, (_, last) in enumerate(spans) if last >= start)
        enough = rng.choice([None, rng.randint(start, log.log_end_offset + 3)])
        max_bytes = rng.choice([1, 100, 300, 1 << 20])
        expected, total = [], 0
        for j in range(i, len(spans)):
            if expected and (total + sizes[j] > max_bytes or enough is not None and spans[j][0] >= enough):
                break
            expected.append(j)
            total += sizes[j]
        read = log.read_batches(start, max_bytes, enough=enough)
        assert [h.base_offset for _, h in read.batches] == [spans[j][0] for j in expected]
        assert len(read.records) == total and read.next_offset == spans[expected[-1]][1] + 1
        start = read.next_offset


def test_segments_roll_by_size(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=300))
    expected = fill(log, 120, random.Random(2))
    assert len(log.segments) > 5
    assert all(segment.size <= 2000 for segment in log.segments)
    names = sorted(p.name for p in (tmp_path / "t-0").glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]
    assert all((tmp_path / "t-0" / n.replace(".log", ".index")).exists() for n in names)
    assert read_all(log) == expected
    # every offset is found through the index of the right segment
    rng = random.Random(3)
    for offset in rng.sample(range(len(expected)), 200):
        data = log.read(offset, 1)
        header = read_header(data)
        assert header.base_offset <= offset <= header.last_offset


def test_segments_roll_by_age(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_ms=1000))
    t0 = 1_700_000_000_000
    log.append(build_batch([(None, b"a", t0)]), now_ms=t0)
    log.append(build_batch([(None, b"b", t0)]), now_ms=t0 + 999)
    assert len(log.segments) == 1
    log.append(build_batch([(None, b"c", t0)]), now_ms=t0 + 1000)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert [r[2] for r in read_all(log)] == [b"a", b"b", b"c"]


def test_offset_for_timestamp_matches_a_scan(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    expected = fill(log, 150, random.Random(4))
    assert len(log.segments) > 3
    for target in list(range(900, 5200, 37)) + [1000, 5000, 5001]:
        truth = next(((o, ts) for o, _, _, ts in expected if ts >= target), None)
        assert log.offset_for_timestamp(target) == truth, target


def test_max_timestamp_is_the_first_record_with_the_largest_timestamp_from_the_log_start(tmp_path):
    """ListOffsets' MAX_TIMESTAMP, over many segments with ties (timestamps from a small range),
    then after DeleteRecords moved the log start past some records."""
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    assert log.max_timestamp() is None
    expected = fill(log, 150, random.Random(5))
    assert len(log.segments) > 3
    # the log start just past the last record with the largest timestamp (likely inside a batch), then
    # later: the deleted records' timestamps do not count
    past_max = 1 + max(o for o, _, _, ts in expected if ts == max(t for *_, t in expected))
    for start in (0, past_max, 2 * len(expected) // 3):
        log.delete_records_before(start)
        live = [(o, ts) for o, _, _, ts in expected if o >= log.log_start_offset]
        top = max(ts for _, ts in live)
        assert log.max_timestamp() == next((o, ts) for o, ts in live if ts == top), start


def test_log_append_time_stamps_batches(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    log.append(build_batch([(None, b"a", 5), (None, b"b", 6)]), now_ms=10_000)
    log.append(build_batch([(None, b"c", 7)]), now_ms=20_000)
    headers = [h for _, h in iter_batches(log.read(0, 1 << 20))]  # iter_batches checks the re-sealed CRC
    assert [h.max_timestamp for h in headers] == [10_000, 20_000]
    assert log.offset_for_timestamp(10_001) == (2, 20_000)
    assert log.offset_for_timestamp(0) == (0, 10_000)


def test_flush_policy_advances_recovery_point(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(flush_messages=3))
    log.append(build_batch([(None, b"a", 1)] * 2))
    assert log.recovery_point == 0
    log.append(build_batch([(None, b"a", 1)]))
    assert log.recovery_point == 3
    assert (tmp_path / "t-0" / "recovery-point").read_text() == "0"   # until the checkpoint interval passes


def test_the_recovery_point_file_is_written_by_the_first_flush_after_the_checkpoint_interval(tmp_path):
    d, now = tmp_path / "t-0", [0]
    log = Log.open(d, LogConfig(), clock=lambda: now[0], checkpoint_interval_ms=60_000)
    checkpoints = []
    for minute in range(3):
        for _ in range(4):
            log.append(build_batch([(None, b"a", 1)] * 5))
            log.flush()
            checkpoints.append(int((d / "recovery-point").read_text()))
            now[0] += 20_000
        assert log.recovery_point == log.log_end_offset
    # written at open (0), then by the flushes at 60, 120 and 180 s (20 s apart, 5 records each)
    assert checkpoints == [0, 0, 0, 20, 20, 20, 35, 35, 35, 50, 50, 50]
    log.append(build_batch([(None, b"a", 1)]))
    log.close()   # a clean shutdown writes it too
    assert (d / "recovery-point").read_text() == "61"


def test_a_crash_recovers_from_the_last_checkpoint_not_from_zero(tmp_path):
    """What the checkpoint is for: below it nothing is validated again (a flipped payload byte
    there stays unnoticed); past it, flushed or not, every batch is, and the torn one is cut."""
    d, now = tmp_path / "t-0", [0]
    cfg = LogConfig(segment_bytes=2000)
    log = Log.open(d, cfg, clock=lambda: now[0])
    expected = fill(log, 40, random.Random(8))
    log.flush()
    expected += fill(log, 40, random.Random(9))
    now[0] += 60_000
    log.flush()   # the interval has passed: checkpoint at the log end
    checkpoint = log.log_end_offset
    expected += fill(log, 20, random.Random(10))
    log.flush()   # acknowledged, past the checkpoint
    first_segment, active = log.segments[0].path, log.active_segment.path
    torn = read_header(log.read(log.log_end_offset - 1, 1)).base_offset
    crash(log)
    assert int((d / "recovery-point").read_text()) == checkpoint
    data = bytearray(first_segment.read_bytes())
    flipped = read_header(data)
    data[flipped.size - 1] ^= 0xFF   # below the checkpoint: not re-read
    first_segment.write_bytes(data)
    os.truncate(active, os.path.getsize(active) - 3)   # a torn last batch past it
    log = Log.open(d, cfg)
    assert checkpoint < torn == log.log_end_offset
    after_flipped = flipped.last_offset + 1
    assert read_all(log, after_flipped) == [e for e in expected if after_flipped <= e[0] < torn]


def crash(log):
    """Stop using ``log`` as a SIGKILL would: no close, no marker, no pending index entry written
    (descriptors just dropped)."""
    for segment in log.segments:
        SEGMENT_FILES.close(segment.path)


def test_clean_shutdown_marker(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    expected = fill(log, 10, random.Random(5))
    log.close()
    assert (d / ".clean-shutdown").exists()
    # A clean shutdown skips validation: a flipped byte inside a batch goes unnoticed ...
    path = d / f"{0:020d}.log"
    data = bytearray(path.read_bytes())
    data[read_header(data).size - 1] ^= 0xFF
    path.write_bytes(data)
    log = Log.open(d, LogConfig())
    assert not (d / ".clean-shutdown").exists()
    assert log.log_end_offset == len(expected)
    expected += fill(log, 5, random.Random(6))  # not flushed: past the recovery point
    crash(log)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(data)
    # ... while after a crash what follows the recovery point is validated and cut before the corrupt batch.
    log = Log.open(d, LogConfig())
    assert log.log_end_offset < len(expected)


def test_recovery_truncates_torn_tail_and_appends_continue(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(segment_bytes=4000, index_interval_bytes=200))
    expected = fill(log, 60, random.Random(6))
    last_batch = read_header(log.read(log.log_end_offset - 1, 1))
    active = log.active_segment.path
    crash(log)
    os.truncate(active, os.path.getsize(active) - 3)  # mid-batch
    log = Log.open(d, LogConfig(segment_bytes=4000, index_interval_bytes=200))
    assert log.log_end_offset == last_batch.base_offset
    kept = [e for e in expected if e[0] < last_batch.base_offset]
    assert read_all(log) == kept
    first, _ = log.append(build_batch([(b"new", b"value", 9)]))
    assert first == last_batch.base_offset
    assert read_all(log)[-1] == (first, b"new", b"value", 9)


def test_recovery_drops_batch_with_flipped_byte(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    expected = fill(log, 20, random.Random(7))
    last = read_header(log.read(log.log_end_offset - 1, 1))
    path = log.active_segment.path
    crash(log)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(data)
    log = Log.open(d, LogConfig())
    assert log.log_end_offset == last.base_offset
    assert read_all(log) == [e for e in expected if e[0] < last.base_offset]
    assert os.path.getsize(path) == len(data) - last.size


def test_recovery_starts_at_recovery_point(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=2000)
    log = Log.open(d, cfg)
    fill(log, 40, random.Random(8))
    log.checkpoint()
    first_segment = log.segments[0].path
    end = log.log_end_offset
    crash(log)
    # Below the recovery point nothing is validated (a flipped payload byte there stays).
    data = bytearray(first_segment.read_bytes())
    data[read_header(data).size - 1] ^= 0xFF  # last byte of the first batch: its records, not a header
    first_segment.write_bytes(data)
    log = Log.open(d, cfg)
    assert log.log_end_offset == end


def test_recovery_validates_only_past_the_recovery_point_of_the_active_segment(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig())
    rng = random.Random(13)
    fill(log, 30, rng)
    log.checkpoint()
    point = log.log_end_offset
    fill(log, 10, rng)
    last = read_header(log.read(log.log_end_offset - 1, 1))
    path = log.active_segment.path
    crash(log)
    data = bytearray(path.read_bytes())
    data[read_header(data).size - 1] ^= 0xFF  # the first batch's records: fsynced, below the point, not re-read
    data[-1] ^= 0xFF                          # the last batch, past the point: validated, cut off
    path.write_bytes(data)
    log = Log.open(d, LogConfig())
    assert len(log.segments) == 1 and point < last.base_offset
    assert log.log_end_offset == last.base_offset
    assert log.recovery_point == last.base_offset


def test_recovery_from_the_recovery_point_rebuilds_what_a_full_recovery_does(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(index_interval_bytes=300)
    log = Log.open(d, cfg)
    rng = random.Random(14)
    expected = fill(log, 60, rng)
    log.checkpoint()
    expected += fill(log, 40, rng)
    last = read_header(log.read(log.log_end_offset - 1, 1))
    path = log.active_segment.path
    crash(log)
    os.truncate(path, os.path.getsize(path) - 3)  # torn last batch
    log = Log.open(d, cfg)
    kept = [e for e in expected if e[0] < last.base_offset]
    assert read_all(log) == kept
    for target in (1500, 3000, 4900):
        assert log.offset_for_timestamp(target) == next(((o, ts) for o, _, _, ts in kept if ts >= target), None)
    log.close()
    partial = {p.name: p.read_bytes() for p in sorted(d.glob("*index"))}
    for index in d.glob("*index"):
        index.unlink()
    Log.open(d, cfg).close()  # indexes rebuilt from the whole segment
    assert {p.name: p.read_bytes() for p in sorted(d.glob("*index"))} == partial
    assert len(partial[f"{0:020d}.index"]) > 8


def test_torn_tail_in_older_segment_removes_later_segments(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=2000)
    log = Log.open(d, cfg)
    fill(log, 40, random.Random(9))
    second = log.segments[1]
    cut_at = read_header(second.read(second.base_offset, 1)).last_offset + 1  # keep its first batch
    crash(log)
    os.truncate(second.path, read_header(second.path.read_bytes()).size + 10)
    log = Log.open(d, cfg)
    assert [s.base_offset for s in log.segments] == [0, second.base_offset]
    assert log.log_end_offset == cut_at
    assert sorted(p.name for p in d.glob("*.log")) == [f"{0:020d}.log", f"{second.base_offset:020d}.log"]


def test_missing_or_corrupt_indexes_are_rebuilt(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=150)
    log = Log.open(d, cfg)
    expected = fill(log, 80, random.Random(10))
    log.close()
    indexes = {p.name: p.read_bytes() for p in sorted(d.glob("*index"))}
    assert any(indexes.values())
    victims = sorted(d.glob("*.index"))
    victims[0].unlink()
    sorted(d.glob("*.timeindex"))[1].unlink()
    victims[2].write_bytes(b"\x00" * 7)  # not a whole entry
    log = Log.open(d, cfg)
    assert read_all(log) == expected
    assert all(len(segment.offset_index) > 0 for segment in log.segments[:3])
    log.close()
    # rebuilt from the log, the indexes hold what the appends wrote
    assert {p.name: p.read_bytes() for p in sorted(d.glob("*index"))} == indexes


def test_a_log_starting_past_4_billion_reads_finds_timestamps_and_recovers(tmp_path):
    """Segment indexes store offsets relative to their base as u32: every lookup and rebuild
    translates them, for bases that an absolute u32 offset could not hold."""
    d = tmp_path / "t-0"
    d.mkdir()
    start = 5_000_000_000
    (d / "log-start-offset").write_text(str(start))
    cfg = LogConfig(segment_bytes=3000, index_interval_bytes=200)
    log = Log.open(d, cfg)
    rng = random.Random(15)
    expected = fill(log, 60, rng)
    log.flush()
    expected += fill(log, 30, rng)
    assert expected[0][0] == start and len(log.segments) > 3
    last = read_header(log.read(log.log_end_offset - 1, 1))
    path = log.active_segment.path
    crash(log)
    os.truncate(path, os.path.getsize(path) - 3)  # torn last batch, past the recovery point
    log = Log.open(d, cfg)
    kept = [e for e in expected if e[0] < last.base_offset]
    assert read_all(log, start) == kept
    assert read_all(log, start, max_bytes=1) == kept
    for target in list(range(900, 5200, 97)) + [5001]:
        assert log.offset_for_timestamp(target) == next(((o, ts) for o, _, _, ts in kept if ts >= target), None)
    log.close()
    indexes = {p.name: p.read_bytes() for p in sorted(d.glob("*index"))}
    for index in d.glob("*index"):
        index.unlink()
    Log.open(d, cfg).close()  # rebuilt from the whole segments
    assert {p.name: p.read_bytes() for p in sorted(d.glob("*index"))} == indexes


def test_recovery_validates_batches_larger_than_its_read_ahead(tmp_path):
    """Recovery reads the log in windows of RECOVERY_CHUNK bytes, header walks in SCAN_CHUNK ones:
    batches larger than either, and batches straddling a window's end, are read whole."""
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(index_interval_bytes=50_000))
    rng = random.Random(16)
    expected = []
    for size in [SCAN_CHUNK + 10] * 3 + [RECOVERY_CHUNK + 1000] + [700_000] * 13 + [300]:
        records = [(b"k", rng.randbytes(size), 1000 + len(expected))]
        first, _ = log.append(build_batch(records))
        expected.append((first, *records[0]))
    assert log.active_segment.size > 2 * RECOVERY_CHUNK
    last = read_header(log.read(log.log_end_offset - 1, 1))
    path = log.active_segment.path
    crash(log)  # no flush: the whole segment is validated
    os.truncate(path, os.path.getsize(path) - 3)
    log = Log.open(d, LogConfig(index_interval_bytes=50_000))
    assert log.log_end_offset == last.base_offset
    assert read_all(log, max_bytes=1) == expected[:-1]


def test_reopen_after_clean_close_keeps_everything(tmp_path):
    d = tmp_path / "t-0"
    cfg = LogConfig(segment_bytes=5000, index_interval_bytes=500)
    log = Log.open(d, cfg)
    rng = random.Random(11)
    expected = fill(log, 50, rng)
    log.close()
    log = Log.open(d, cfg)
    assert read_all(log) == expected
    expected += fill(log, 50, rng)
    assert read_all(log) == expected
    for target in (1000, 2500, 4999):
        assert log.offset_for_timestamp(target) == next(((o, ts) for o, _, _, ts in expected if ts >= target), None)


# --- the topic catalog -----------------------------------------------------------------------

def test_topics_persist_with_their_configs(tmp_path):
    defaults = LogConfig(segment_bytes=10_000)
    manager = LogManager(tmp_path, defaults)
    topic = manager.create_topic("orders", 3, {"segment.bytes": "2000", "message.timestamp.type": "LogAppendTime"})
    assert topic.config.segment_bytes == 2000 and topic.config.log_append_time
    assert len(topic.partitions) == 3
    manager.create_topic("plain", 1, {"retention.ms": None})  # CreateTopics may send null: the default
    manager.get_log("orders", 2).append(build_batch([(b"k", b"v", 1)]))
    assert manager.get_log("orders", 3) is None and manager.get_log("nope", 0) is None
    manager.close()

    manager = LogManager(tmp_path, defaults)
    assert sorted(manager.topics) == ["orders", "plain"]
    orders = manager.topics["orders"]
    assert orders.configs == {"segment.bytes": "2000", "message.timestamp.type": "LogAppendTime"}
    assert orders.config.segment_bytes == 2000 and manager.topics["plain"].config.segment_bytes == 10_000
    assert manager.topics["plain"].configs == {}
    assert [p.log_end_offset for p in orders.partitions] == [0, 0, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.json", "orders-0", "orders-1", "orders-2",
                                                          "plain-0"]

    manager.delete_topic("orders")
    assert "orders" not in manager.topics and not (tmp_path / "orders-2").exists()
    with pytest.raises(UnknownTopicError):
        manager.delete_topic("orders")
    manager.close()
    manager = LogManager(tmp_path, defaults)
    assert sorted(manager.topics) == ["plain"]
    again = manager.create_topic("orders", 1)
    assert again.partitions[0].log_end_offset == 0 and again.configs == {}


def test_interrupted_delete_finishes_at_load(tmp_path):
    manager = LogManager(tmp_path)
    manager.create_topic("gone", 2)
    manager.get_log("gone", 0).append(build_batch([(b"k", b"v", 1)]))
    manager.close()
    # a crash right after the commit point of delete_topic
    catalog = json.loads((tmp_path / "catalog.json").read_text())
    catalog["deleting"] = {"gone": catalog["topics"].pop("gone")["partitions"]}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    manager = LogManager(tmp_path)
    assert manager.topics == {}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["catalog.json"]
    assert json.loads((tmp_path / "catalog.json").read_text())["deleting"] == {}


def test_topic_create_rejects_bad_input(tmp_path):
    manager = LogManager(tmp_path)
    manager.create_topic("a.b_c-D9", 1)
    for name in ("", ".", "..", "has space", "x/y", "é", "a" * 250):
        with pytest.raises(InvalidTopicError):
            manager.create_topic(name, 1)
    manager.create_topic("a" * 249, 1)
    with pytest.raises(TopicExistsError):
        manager.create_topic("a.b_c-D9", 1)
    with pytest.raises(ValueError, match="partitions"):
        manager.create_topic("zero", 0)
    with pytest.raises(ValueError, match="no.such"):
        manager.create_topic("bad", 1, {"no.such": "1"})
    with pytest.raises(ValueError, match="segment.bytes"):
        manager.create_topic("bad", 1, {"segment.bytes": "lots"})
    with pytest.raises(ValueError, match="message.timestamp.type"):
        manager.create_topic("bad", 1, {"message.timestamp.type": "Whenever"})
    assert sorted(manager.topics) == sorted(["a" * 249, "a.b_c-D9"])
    assert not list(tmp_path.glob("bad-*")) and not list(tmp_path.glob("zero-*"))


def test_config_from_kafka_names():
    defaults = LogConfig()
    cfg = LogConfig.from_topic_configs({"segment.ms": "60000", "flush.messages": "1", "cleanup.policy": "delete,compact",
                                        "min.cleanable.dirty.ratio": "0.25"}, defaults)
    assert (cfg.segment_ms, cfg.flush_messages, cfg.cleanup_policy, cfg.min_cleanable_dirty_ratio) == \
        (60000, 1, "compact,delete", 0.25)
    assert cfg.compact and cfg.delete and defaults.segment_ms == 7 * 24 * 3600 * 1000
    assert LogConfig.from_topic_configs(cfg.to_topic_configs(), LogConfig()) == cfg
    for bad in ({"flush.messages": "0"}, {"retention.ms": "-2"}, {"cleanup.policy": "forever"},
                {"min.cleanable.dirty.ratio": "1.5"}, {"segment.bytes": "1e9"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            LogConfig.from_topic_configs(bad, defaults)
