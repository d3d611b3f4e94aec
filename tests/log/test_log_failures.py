"""Storage that fails: a full disk, a creation that breaks half-way, more partitions than descriptors.

The disk is a real tmpfs filled to ENOSPC (tests/support/small_disk.py); what the log holds is
checked against plain-Python bookkeeping of what was appended.
"""
import asyncio
import errno
import json
import os
import random

import pytest

from headwater.broker.groups.group import CommittedOffset
from headwater.log import Log, LogConfig, LogManager, PartitionLimitError
from headwater.log.files import SEGMENT_FILES, OpenFiles
from headwater.protocol.errors import ErrorCode

from tests.support.small_disk import fill_up, small_disk
from tests.support.parts import close_appender, open_appender, open_groups
from tests.log.test_log import build_batch, crash, fill, read_all


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_append_on_a_full_disk_leaves_no_torn_batch_and_appends_resume(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        log = Log.open(disk / "t-0", LogConfig())
        rng = random.Random(1)
        expected = fill(log, 20, rng)
        size = os.path.getsize(log.active_segment.path)
        filler = fill_up(disk)
        # Larger than the free room left in the segment's last page: the write stops part-way.
        with pytest.raises(OSError) as failed:
            log.append(build_batch([(b"k", rng.randbytes(20_000), 3000)]))
        assert failed.value.errno == errno.ENOSPC
        assert os.path.getsize(log.active_segment.path) == size == log.active_segment.size
        assert log.log_end_offset == len(expected)
        filler.unlink()
        expected += fill(log, 20, rng)
        assert read_all(log) == expected
        log.flush()
        crash(log)
        log = Log.open(disk / "t-0", LogConfig())
        assert read_all(log) == expected


def test_catalog_writes_that_fail_change_nothing(tmp_path):
    with small_disk(tmp_path / "disk", "1m") as disk:
        data = disk / "data"
        manager = LogManager(data)
        manager.create_topic("keep", 2)
        manager.create_topic("doomed", 2, {"retention.ms": "1000"})
        expected = fill(manager.get_log("doomed", 1), 5, random.Random(2))
        catalog = (data / "catalog.json").read_text()
        filler = fill_up(disk)
        with pytest.raises(OSError):
            manager.delete_topic("doomed")
        with pytest.raises(OSError):
            manager.alter_topic_configs("doomed", {"retention.ms": "5000"}, incremental=True)
        with pytest.raises(OSError):
            manager.create_topic("new", 3)
        assert sorted(manager.topics) == ["doomed", "keep"]
        assert manager.topics["doomed"].configs == {"retention.ms": "1000"}
        assert read_all(manager.get_log("doomed", 1)) == expected
        assert not list(data.glob("new-*")) and not list(data.glob("*.tmp"))
        assert (data / "catalog.json").read_text() == catalog
        filler.unlink()
        manager.delete_topic("doomed")
        manager.create_topic("new", 3)
        manager.close()
        assert sorted(LogManager(data).topics) == ["keep", "new"]


def test_failed_creation_releases_everything_it_took(tmp_path):
    data = tmp_path / "data"
    manager = LogManager(data)
    manager.create_topic("keep", 1)
    (data / "broken-3").write_text("a file where partition 3's directory must go")
    catalog = (data / "catalog.json").read_text()
    descriptors, pooled = open_descriptors(), len(SEGMENT_FILES)
    with pytest.raises(OSError):
        manager.create_topic("broken", 6)
    assert list(manager.topics) == ["keep"]
    assert sorted(p.name for p in data.iterdir() if p.name.startswith("broken")) == ["broken-3"]
    assert (data / "catalog.json").read_text() == catalog
    assert open_descriptors() == descriptors and len(SEGMENT_FILES) == pooled


def test_partition_limit_is_checked_before_anything_is_created(tmp_path):
    data = tmp_path / "data"
    manager = LogManager(data, max_partitions=10)
    manager.create_topic("a", 6)
    with pytest.raises(PartitionLimitError, match="limit of 10"):
        manager.create_topic("b", 5)
    manager.create_topic("b", 4)
    with pytest.raises(PartitionLimitError):
        manager.create_topic("c", 1)
    assert not list(data.glob("c-*"))
    assert json.loads((data / "catalog.json").read_text())["topics"].keys() == {"a", "b"}


def test_segment_descriptors_stay_within_the_pool(tmp_path, monkeypatch):
    monkeypatch.setattr(SEGMENT_FILES, "capacity", 8)
    descriptors = open_descriptors()
    manager = LogManager(tmp_path / "data", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    manager.create_topic("many", 40)
    rng = random.Random(3)
    expected = {p: fill(manager.get_log("many", p), 10, rng) for p in range(40)}
    assert sum(len(manager.get_log("many", p).segments) for p in range(40)) > 80
    assert open_descriptors() <= descriptors + 8
    manager.flush_all()
    for p in range(40):
        assert read_all(manager.get_log("many", p)) == expected[p]
    assert open_descriptors() <= descriptors + 8
    manager.close()
    manager = LogManager(tmp_path / "data", LogConfig(segment_bytes=3000, index_interval_bytes=200))
    assert {p: read_all(manager.get_log("many", p)) for p in range(40)} == expected
    assert open_descriptors() <= descriptors + 8


def test_a_descriptor_in_use_is_never_closed_under_its_user(tmp_path):
    pool = OpenFiles(capacity=2)
    paths = [tmp_path / f"{i}.log" for i in range(4)]
    with pool.use(paths[0]) as pinned:
        for path in paths[1:]:
            with pool.use(path):
                pass
        pool.close(paths[0])
        os.fstat(pinned)  # still open: eviction and close both waited for the user
        assert len(pool) == 1  # paths[1] and [2] were evicted, paths[0] let go of
    with pytest.raises(OSError):
        os.fstat(pinned)
    os.rename(paths[3], tmp_path / "renamed.log")
    pool.renamed(paths[3], tmp_path / "renamed.log")
    with pool.use(tmp_path / "renamed.log") as fd:
        os.write(fd, b"follows the file")
    assert (tmp_path / "renamed.log").read_bytes() == b"follows the file"
    assert len(pool) == 1  # the descriptor was reused, not opened again


def test_offset_commit_on_a_full_disk_answers_coordinator_not_available(tmp_path, clock):
    with small_disk(tmp_path / "disk", "1m") as disk:
        def commit(groups, offset: int) -> ErrorCode:
            return asyncio.run(groups.commit("g", -1, "", None, {("orders", 0): CommittedOffset(offset)}))
        appender = open_appender(disk / "data", flush="always")
        groups = open_groups(appender, clock)
        assert commit(groups, 5) == ErrorCode.NONE
        filler = fill_up(disk)
        # Commits fit the segment's last page until one needs another: that one finds no room.
        offset = 6
        while (answer := commit(groups, offset)) == ErrorCode.NONE and offset < 1000:
            offset += 1
        assert answer == ErrorCode.COORDINATOR_NOT_AVAILABLE
        filler.unlink()
        assert commit(groups, offset + 1) == ErrorCode.NONE
        close_appender(appender)
        appender = open_appender(disk / "data", flush="always")
        assert open_groups(appender, clock).committed("g")[("orders", 0)].offset == offset + 1
        close_appender(appender)
