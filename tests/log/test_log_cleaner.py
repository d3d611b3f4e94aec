"""Log compaction: the cleaned log equals a plain-Python dict of the latest record per key."""
import logging
import os
import random
import threading

import pytest

from headwater.log import Log, LogConfig, LogManager
from headwater.log.cleaner import CleanerStats, LogCleaner, clean_log, rewrite_segment
from headwater.log.cleaner_worker import CleanerWorker
from headwater.records import iter_batches
from headwater.testing import wait_until

from tests.log.test_log import CODECS, build_batch, crash, read_all

DAY = 24 * 3600 * 1000
T0 = 1_700_000_000_000


def compacted_config(**overrides):
    settings = dict(cleanup_policy="compact", segment_bytes=3000, index_interval_bytes=300,
                    min_cleanable_dirty_ratio=0.0, min_compaction_lag_ms=0, delete_retention_ms=DAY)
    settings.update(overrides)
    return LogConfig(**settings)


def produce_updates(log, rng, keys=30, updates=300, codec=0, ts=T0, delete_every=7):
    """Random updates and deletes (tombstones); returns every record appended as (offset, key, value, ts)."""
    appended, i = [], 0
    while i < updates:
        n = rng.randint(1, 8)
        records = []
        for _ in range(n):
            key = b"key-%d" % rng.randrange(keys)
            value = None if i % delete_every == 0 else b"value %d of %s; " % (i, key) * 4
            records.append((key, value, ts + i))
            i += 1
        first, _ = log.append(build_batch(records, codec))
        appended += [(first + j, k, v, t) for j, (k, v, t) in enumerate(records)]
    return appended


def all_headers(log):
    return [h for segment in log.segments for _, h in iter_batches(segment.read(segment.base_offset, 1 << 30) or b"")]


def latest_per_key(appended, drop_tombstones):
    """Ground truth: the last record of each key, in offset order."""
    latest = {}
    for record in appended:
        latest[record[1]] = record
    return sorted(r for r in latest.values() if not (drop_tombstones and r[2] is None))


@pytest.mark.parametrize("codec", CODECS)
def test_compaction_keeps_latest_per_key_at_original_offsets(tmp_path, codec):
    log = Log.open(tmp_path / "c-0", compacted_config())
    rng = random.Random(codec)
    appended = produce_updates(log, rng, codec=CODECS[codec])
    log.roll()  # everything closed, so everything is cleanable
    codecs = {h.base_offset: h.compression for h in all_headers(log)}
    assert CODECS[codec] in codecs.values()
    end, size_before = log.log_end_offset, log.size_bytes
    stats = clean_log(log, now_ms=T0 + 1000)
    assert stats.records_removed > 0 and stats.segments_rewritten > 0
    # tombstones younger than delete.retention.ms stay, so consumers can still see the delete
    assert read_all(log) == latest_per_key(appended, drop_tombstones=False)
    assert log.size_bytes < size_before and log.log_end_offset == end
    for header in all_headers(log):  # iter_batches checks every CRC
        assert header.compression == codecs[header.base_offset]
    # a later pass, past delete.retention.ms, drops the tombstones
    appended += produce_updates(log, rng, codec=CODECS[codec], ts=T0 + 2 * DAY)
    log.roll()
    clean_log(log, now_ms=T0 + 4 * DAY)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=True)
    # and the result survives a restart
    log.close()
    log = Log.open(tmp_path / "c-0", compacted_config())
    assert read_all(log) == latest_per_key(appended, drop_tombstones=True)
    assert log.log_end_offset == appended[-1][0] + 1


def test_expired_tombstones_go_without_new_writes(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config())
    appended = produce_updates(log, random.Random(1))
    log.roll()
    clean_log(log, now_ms=T0 + 1000)
    assert any(r[2] is None for r in read_all(log))
    assert clean_log(log, now_ms=T0 + 2000) is None  # nothing dirty, no tombstone due yet
    clean_log(log, now_ms=T0 + 2 * DAY)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=True)


def test_active_segment_and_young_records_untouched(tmp_path):
    lag = 10_000
    log = Log.open(tmp_path / "c-0", compacted_config(min_compaction_lag_ms=lag))
    rng = random.Random(2)
    old = produce_updates(log, rng, ts=T0)
    log.roll()
    young = produce_updates(log, rng, ts=T0 + 50_000)
    log.roll()
    active = produce_updates(log, rng, updates=20, ts=T0 + 60_000)
    young_segments = [s for s in log.segments[:-1] if s.base_offset >= young[0][0]]
    before = {s.base_offset: s.path.read_bytes() for s in young_segments + [log.active_segment]}
    clean_log(log, now_ms=T0 + 50_000 + lag - 1)  # the young records are not old enough yet
    assert {s.base_offset: s.path.read_bytes() for s in log.segments if s.base_offset in before} == before
    # the old section holds exactly its own latest-per-key (keys updated later still keep their older value)
    assert read_all(log) == latest_per_key(old, drop_tombstones=False) + young + active


def test_batch_producer_fields_are_kept(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config(segment_bytes=1 << 20))
    originals = {}
    for i in range(20):
        batch = build_batch([(b"k%d" % (j % 3), b"v%d-%d" % (i, j), T0) for j in range(5)], codec=1,
                            producer_id=4242, producer_epoch=3, base_sequence=5 * i)
        first, _ = log.append(batch)
        originals[first] = batch
    log.roll()
    clean_log(log, now_ms=T0 + 1)
    survivors = all_headers(log)
    assert survivors and all(h.base_offset in originals for h in survivors)
    for header in survivors:
        assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_offset_delta) == \
            (4242, 3, header.base_offset, 4)
    assert [(o, k, v) for o, k, v, _ in read_all(log)] == [(97, b"k2", b"v19-2"), (98, b"k0", b"v19-3"),
                                                         (99, b"k1", b"v19-4")]


def test_dirty_ratio_gates_cleaning(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config(min_cleanable_dirty_ratio=0.5))
    rng = random.Random(3)
    produce_updates(log, rng, updates=400)
    log.roll()
    assert clean_log(log, now_ms=T0 + 1000) is not None
    produce_updates(log, rng, updates=10, keys=1000)  # a little new, unique data: below the ratio
    log.roll()
    assert clean_log(log, now_ms=T0 + 1000) is None


# --- crash safety: the states a SIGKILL can leave between the cleaner's steps --------------------

def prepared_log(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config())
    appended = produce_updates(log, random.Random(4))
    log.roll()
    return log, appended


def test_crash_before_commit_discards_cleaned_files(tmp_path):
    log, appended = prepared_log(tmp_path)
    segment = log.segments[0]
    original = read_all(log)
    rewrite = rewrite_segment(segment, {}, T0 + 2 * DAY, CleanerStats())
    assert rewrite is not None  # tombstones past the horizon: the segment changes
    # the uncommitted state: back to .cleaned, the index already renamed to .swap
    os.replace(rewrite.path, str(rewrite.path).replace(".swap", ".cleaned"))
    crash(log)
    log = Log.open(tmp_path / "c-0", compacted_config())
    assert read_all(log) == original
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.suffix in (".cleaned", ".swap")]


@pytest.mark.parametrize("renamed", [0, 1, 2])
def test_crash_after_commit_finishes_swap(tmp_path, renamed):
    """``renamed`` of the three .swap files (indexes first) already moved over the originals."""
    log, appended = prepared_log(tmp_path)
    latest = {}
    for offset, key, _, _ in appended:
        latest[key] = offset
    segment = log.segments[0]
    rewrite = rewrite_segment(segment, latest, T0, CleanerStats())
    kept = [r for r in read_all(log) if r[0] >= segment.next_offset or latest[r[1]] == r[0]]
    for path in (rewrite.offset_index.path, rewrite.time_index.path)[:renamed]:
        os.replace(path, str(path).removesuffix(".swap"))
    crash(log)
    log = Log.open(tmp_path / "c-0", compacted_config())
    assert read_all(log) == kept
    assert not [p for p in (tmp_path / "c-0").iterdir() if p.suffix in (".cleaned", ".swap")]
    log.close()
    log = Log.open(tmp_path / "c-0", compacted_config())
    assert read_all(log) == kept


def test_cleaning_while_appending_from_another_thread(tmp_path):
    manager = LogManager(tmp_path)
    topic = manager.create_topic("c", 1, {"cleanup.policy": "compact", "segment.bytes": "2000",
                                          "min.cleanable.dirty.ratio": "0.01"})
    log = topic.partitions[0]
    appended, done = [], threading.Event()

    def cleaner():
        while not done.is_set():
            manager.clean(now_ms=T0 + 10**9)

    thread = threading.Thread(target=cleaner)
    thread.start()
    try:
        appended = produce_updates(log, random.Random(5), updates=3000, keys=40, delete_every=10**9)
    finally:
        done.set()
        thread.join()
    log.roll()
    manager.clean(now_ms=T0 + 10**9)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=False)
    manager.close()


def test_a_rewrite_left_by_a_killed_cleaner_is_not_built_upon(tmp_path):
    log, appended = prepared_log(tmp_path)
    last_closed = log.segments[-2]  # it holds latest values: its rewrite keeps records
    junk = tmp_path / "c-0" / ("%020d.log.cleaned" % last_closed.base_offset)
    junk.write_bytes(last_closed.path.read_bytes()[:100])  # a killed pass's half-written rewrite
    clean_log(log, now_ms=T0 + 1000)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=False)
    assert not junk.exists()


def test_a_pass_running_when_the_worker_stops_ends_quietly(tmp_path, caplog):
    logs = []
    for i in range(3):
        log = Log.open(tmp_path / f"c-{i}", compacted_config())
        produce_updates(log, random.Random(i))
        log.roll()
        logs.append(log)
    before = [read_all(log) for log in logs]
    worker = CleanerWorker(io_max_bytes_per_second=20_000)   # throttled: the first log's job outlasts the stop
    pass_ = threading.Thread(target=LogCleaner(worker.run).clean, args=(logs, T0 + DAY))
    with caplog.at_level(logging.INFO, logger="headwater.log"):
        pass_.start()
        wait_until(lambda: worker._process is not None, timeout=30, interval=0.01, what="the worker to start")
        worker.stop()
        pass_.join(60)
    assert not pass_.is_alive()
    assert [r.getMessage() for r in caplog.records if "next pass" in r.getMessage()] == []
    assert [read_all(log) for log in logs] == before   # the stopped pass left every log as it was
    assert [list(log.directory.glob("*.cleaned")) for log in logs] == [[], [], []]
