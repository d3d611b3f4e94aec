"""The log cleaner's bounds: its I/O throttle (log.cleaner.io.max.bytes.per.second), by bytes
counted on a hand-driven clock; what a stored batch may decompress to; and the logs it sets
aside as uncleanable, across restarts."""
import random

import pytest

from headwater.log import Log
from headwater.log.cleaner import LogCleaner
from headwater.log.compaction import compact
from headwater.log.throttle import Throttle
from headwater.records import Compression, InvalidRecordError, Record, decode_records, encode_batch

from tests.log.test_log import read_all
from tests.log.test_log_cleaner import T0, compacted_config, latest_per_key, produce_updates


class HandClock:
    """Seconds that pass only when the throttle sleeps or the test says so."""

    def __init__(self):
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_throttle_sleeps_whenever_the_bytes_run_ahead_of_the_rate():
    clock = HandClock()
    throttle = Throttle(1000, clock, clock.sleep, check_interval_s=0.3)
    throttle.observe(100)           # 100 bytes at 1000 B/s take 0.1 s
    assert clock.slept == [pytest.approx(0.1)]
    clock.now += 0.05
    throttle.observe(100)           # 200 bytes in the period, 0.15 s of it gone
    assert clock.slept[1:] == [pytest.approx(0.05)]
    throttle.observe(200)           # 400 bytes, 0.2 s gone: 0.2 s more, and the period ends
    assert clock.slept[2:] == [pytest.approx(0.2)] and clock.now == pytest.approx(0.4)
    clock.now += 1.0                # idle: the next report is covered by it, and a new period begins
    throttle.observe(300)
    assert len(clock.slept) == 3
    throttle.observe(300)           # 300 bytes of the new period in no time: 0.3 s
    assert clock.slept[3:] == [pytest.approx(0.3)]


def test_the_cleaner_pays_the_throttle_for_every_byte_it_reads_and_writes(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config())
    appended = produce_updates(log, random.Random(7), updates=600)
    log.roll()
    closed = sum(s.size for s in log.closed_segments())
    clock = HandClock()
    rate = 50_000.0
    throttle = Throttle(rate, clock, clock.sleep, check_interval_s=0)  # every byte paid at once
    stats = LogCleaner(run=lambda job: compact(job, throttle)).clean([log], T0 + 1000)
    assert stats.records_removed > 0 and stats.bytes_written > 0
    # The first pass maps every closed segment (all dirty), then rewrites each of them.
    assert clock.now == pytest.approx((2 * closed + stats.bytes_written) / rate)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=False)


def test_a_decompression_bomb_on_disk_makes_the_log_uncleanable_not_the_broker_run_out_of_memory(tmp_path):
    bomb = encode_batch([Record(0, T0, b"k", bytes(40 << 20))], compression=Compression.ZSTD)
    assert len(bomb) < 64 << 10
    with pytest.raises(InvalidRecordError, match="does not decompress within"):
        decode_records(bomb)
    log = Log.open(tmp_path / "c-0", compacted_config())
    log.append(bytearray(bomb))
    log.roll()
    cleaner = LogCleaner()
    assert cleaner.clean([log], T0 + 1000).uncleanable_logs == 1
    assert log in cleaner.uncleanable


def test_an_uncleanable_log_stays_set_aside_across_a_restart_until_its_mark_is_deleted(tmp_path):
    log = Log.open(tmp_path / "c-0", compacted_config())
    appended = produce_updates(log, random.Random(8))
    log.roll()
    segment = log.segments[0].path
    log.close()
    intact = segment.read_bytes()
    with open(segment, "r+b") as f:  # the first batch's codec: zstd, which its records section is not
        f.seek(22)
        f.write(b"\x04")
    log = Log.open(tmp_path / "c-0", compacted_config())
    assert LogCleaner().clean([log], T0 + 1000).uncleanable_logs == 1
    log.close()

    segment.write_bytes(intact)  # repaired; after a restart the log is still set aside
    log = Log.open(tmp_path / "c-0", compacted_config())
    stats = LogCleaner().clean([log], T0 + 1000)
    assert (stats.uncleanable_logs, stats.logs_cleaned) == (1, 0)
    (tmp_path / "c-0" / "cleaner-uncleanable").unlink()  # the operator's word: try again
    stats = LogCleaner().clean([log], T0 + 1000)
    assert (stats.uncleanable_logs, stats.logs_cleaned) == (0, 1)
    assert read_all(log) == latest_per_key(appended, drop_tombstones=False)
