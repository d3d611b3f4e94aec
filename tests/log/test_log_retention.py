"""Retention by time and size, DeleteRecords, and topic config changes."""
import random

import pytest

from headwater.log import Log, LogConfig, LogManager, OffsetOutOfRangeError, UnknownTopicError
from headwater.log.retention import enforce_retention

from tests.log.test_log import build_batch, crash, fill, read_all

T0 = 1_700_000_000_000


def segment_files(log):
    return sorted(p.name for p in log.directory.glob("*.log"))


def test_retention_by_bytes_keeps_the_newest_segments(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=2000, retention_bytes=6000, retention_ms=-1))
    expected = fill(log, 150, random.Random(1))
    sizes = [s.size for s in log.segments]
    # ground truth: drop the oldest closed segments while what remains is still >= retention.bytes
    keep_from, total = 0, sum(sizes)
    while keep_from < len(sizes) - 1 and total - sizes[keep_from] >= 6000:
        total -= sizes[keep_from]
        keep_from += 1
    first_kept = log.segments[keep_from].base_offset
    deleted = enforce_retention(log, now_ms=T0)
    assert deleted == keep_from > 0
    assert log.size_bytes == total and log.log_start_offset == first_kept
    assert segment_files(log) == [f"{s.base_offset:020d}.log" for s in log.segments]
    assert read_all(log, start=first_kept) == [e for e in expected if e[0] >= first_kept]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(first_kept - 1, 100)
    assert enforce_retention(log, now_ms=T0) == 0
    # the log start offset survives a crash (its segment could be the first one anyway) and a clean restart
    crash(log)
    log = Log.open(tmp_path / "t-0", LogConfig())
    assert log.log_start_offset == first_kept


def test_retention_bytes_bounds_disk_under_a_long_produce(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=4000, retention_bytes=20_000, retention_ms=-1))
    rng = random.Random(2)
    for _ in range(30):
        fill(log, 20, rng)
        enforce_retention(log, now_ms=T0)
        assert log.size_bytes < 20_000 + 4000 + 2000  # one segment over, plus the batch that rolled it


def test_retention_by_time_uses_each_segments_newest_record(tmp_path):
    day = 24 * 3600 * 1000
    log = Log.open(tmp_path / "t-0", LogConfig(retention_ms=day))
    for i in range(5):  # one segment per "day"
        log.append(build_batch([(None, b"day %d" % i, T0 + i * day)]))
        log.append(build_batch([(None, b"day %d, later" % i, T0 + i * day + 1000)]))
        log.roll()
    log.append(build_batch([(None, b"active", T0)]))  # old timestamp, but active: never deleted
    now = T0 + 3 * day + 500  # segments 0 and 1 (newest records at +1000 of days 0 and 1) are > 1 day old
    assert enforce_retention(log, now) == 2
    assert log.log_start_offset == 4 and [s.base_offset for s in log.segments] == [4, 6, 8, 10]
    assert enforce_retention(log, now + 10 * day) == 3  # all closed ones, never the active
    assert [s.base_offset for s in log.segments] == [10]
    assert [r[2] for r in read_all(log, start=10)] == [b"active"]


def test_compact_only_topics_are_not_deleted_by_retention(tmp_path):
    log = Log.open(tmp_path / "t-0", LogConfig(segment_bytes=1000, retention_bytes=0, retention_ms=0,
                                               cleanup_policy="compact"))
    fill(log, 30, random.Random(3))
    segments = len(log.segments)
    assert enforce_retention(log, T0 * 2) == 0 and len(log.segments) == segments


def test_delete_records_before(tmp_path):
    d = tmp_path / "t-0"
    log = Log.open(d, LogConfig(segment_bytes=2000))
    expected = fill(log, 60, random.Random(4), now_ms=T0)
    target = log.segments[3].base_offset + 2
    assert log.delete_records_before(target) == target
    assert log.log_start_offset == target and log.segments[0].base_offset == target - 2
    assert len(segment_files(log)) == len(log.segments)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(target - 1, 100)
    assert read_all(log, start=target) == [e for e in expected if e[0] >= target]
    truth = next((o, ts) for o, _, _, ts in expected if o >= target)
    assert log.offset_for_timestamp(0) == truth
    assert log.delete_records_before(5) == target  # never backwards
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records_before(log.log_end_offset + 1)
    log.close()
    log = Log.open(d, LogConfig(segment_bytes=2000))
    assert log.log_start_offset == target
    end = log.log_end_offset
    assert log.delete_records_before(end) == end  # everything: the active segment rolls and goes
    assert log.read(end, 100) == b"" and [s.base_offset for s in log.segments] == [end]
    assert log.append(build_batch([(None, b"after", 1)])) == (end, end)


def test_alter_topic_configs(tmp_path):
    manager = LogManager(tmp_path)
    manager.create_topic("t", 2, {"retention.ms": "1000", "segment.bytes": "5000"})
    topic = manager.alter_topic_configs("t", {"retention.ms": None, "cleanup.policy": "compact"}, incremental=True)
    assert topic.configs == {"segment.bytes": "5000", "cleanup.policy": "compact"}
    assert topic.partitions[1].config.compact and topic.partitions[1].config.retention_ms == LogConfig().retention_ms
    with pytest.raises(ValueError, match="retention.bytes"):
        manager.alter_topic_configs("t", {"retention.bytes": "many"}, incremental=True)
    with pytest.raises(ValueError, match="unknown"):
        manager.alter_topic_configs("t", {"retention.days": "3"}, incremental=False)
    with pytest.raises(UnknownTopicError):
        manager.alter_topic_configs("nope", {}, incremental=True)
    assert topic.configs == {"segment.bytes": "5000", "cleanup.policy": "compact"}  # unchanged by the failures
    manager.alter_topic_configs("t", {"retention.bytes": "100"}, incremental=False)  # replaces all overrides
    manager.close()
    manager = LogManager(tmp_path)
    assert manager.topics["t"].configs == {"retention.bytes": "100"}
    assert manager.topics["t"].partitions[0].config.retention_bytes == 100


def test_manager_enforces_retention_and_cleans(tmp_path):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=1500))
    manager.create_topic("bounded", 1, {"retention.bytes": "3000", "retention.ms": "-1"})
    manager.create_topic("table", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.1"})
    rng = random.Random(5)
    fill(manager.get_log("bounded", 0), 50, rng)
    table = manager.get_log("table", 0)
    for i in range(200):
        table.append(build_batch([(b"k%d" % (i % 5), b"v%d" % i, T0)]))
    table.roll()
    moved = []
    assert manager.enforce_retention(now_ms=T0, moved=lambda *p: moved.append(p)) > 0
    assert manager.get_log("bounded", 0).size_bytes < 3000 + 1500
    assert moved == [("bounded", 0)]   # fetch sessions are told of the new log start
    stats = manager.clean(now_ms=T0 + 1)
    assert stats.logs_cleaned == 1 and stats.records_removed == 195
    assert [(k, v) for _, k, v, _ in read_all(table)] == [(b"k%d" % (i % 5), b"v%d" % i) for i in range(195, 200)]
