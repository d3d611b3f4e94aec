"""A topic's OffsetColumns always hold what its logs say: every way a log end, a log start or a
first unstable offset moves is followed by the columns (a wide fetch reads them, not the logs)."""
import random

import pytest

from headwater.log import LogConfig, LogManager
from headwater.log.offset_columns import NO_UNSTABLE
from headwater.log.retention import enforce_retention
from headwater.log.segment import Segment

from tests.log.test_log import build_batch, fill

T0 = 1_700_000_000_000


def assert_columns_true(topic) -> None:
    logs, columns = topic.partitions, topic.offsets
    assert columns.logs is logs
    assert columns.end.tolist() == [log.log_end_offset for log in logs]
    assert columns.start.tolist() == [log.log_start_offset for log in logs]
    assert columns.unstable.tolist() == [NO_UNSTABLE if log.first_unstable_offset is None
                                         else log.first_unstable_offset for log in logs]


@pytest.fixture
def manager(tmp_path):
    manager = LogManager(tmp_path, LogConfig(segment_bytes=2000, retention_bytes=4000, retention_ms=-1))
    yield manager
    manager.close()


def test_the_columns_follow_appends_rolls_deletions_retention_and_transactions(manager):
    topic = manager.create_topic("t", 4)
    assert_columns_true(topic)
    rng = random.Random(7)
    for log in topic.partitions[:3]:
        fill(log, 40, rng)   # several segments each: rolls
    assert_columns_true(topic)
    assert topic.partitions[0].delete_records_before(30) == 30   # DeleteRecords
    assert_columns_true(topic)
    assert enforce_retention(topic.partitions[1], now_ms=T0) > 0   # retention takes the oldest segments
    assert topic.partitions[1].log_start_offset > 0
    assert_columns_true(topic)
    topic.partitions[2].first_unstable_offset = 5   # a transaction opened, then ended
    assert_columns_true(topic)
    topic.partitions[2].first_unstable_offset = None
    assert_columns_true(topic)


def test_an_append_whose_write_fails_after_moving_the_end_still_shows_the_end(manager, monkeypatch):
    topic = manager.create_topic("t", 2)
    real = Segment.append

    def fails_after_writing(self, *args, **kwargs):
        real(self, *args, **kwargs)
        raise OSError("disk gone")

    monkeypatch.setattr(Segment, "append", fails_after_writing)
    with pytest.raises(OSError):
        topic.partitions[1].append(build_batch([(b"k", b"v", 1000)]))
    assert topic.partitions[1].log_end_offset == 1
    assert_columns_true(topic)


def test_added_partitions_and_a_restart_attach_the_columns_again(manager, tmp_path):
    topic = manager.create_topic("t", 2)
    fill(topic.partitions[0], 5, random.Random(1))
    old_columns_end = topic.offsets.end
    manager.add_partitions("t", 5)
    assert len(topic.offsets.end) == 5 and topic.offsets.end is not old_columns_end
    fill(topic.partitions[4], 5, random.Random(2))   # a new partition writes its own slot
    fill(topic.partitions[0], 5, random.Random(3))   # so does an old one, into the new columns
    assert_columns_true(topic)
    manager.close()
    reopened = LogManager(tmp_path, LogConfig())
    try:
        assert_columns_true(reopened.topics["t"])
        assert reopened.topics["t"].offsets.end[0] > 0
    finally:
        reopened.close()
