"""Group commit, step by step: a recording fsync that waits to be let through shows that no
request is answered before an fsync that started after its append, and that one fsync
covers every request that arrived while the previous one ran."""
import asyncio
import os
import stat
import threading

import pytest

from headwater.broker.fsync_rounds import GroupCommit
from headwater.log import Log, LogConfig
from headwater.records import Record, encode_batch


class GatedSync:
    """fsync stand-in: records (log, appends so far) when each fsync starts, then waits for ``let_one``."""

    def __init__(self):
        self.appended: dict[str, int] = {}   # log -> appends made so far
        self.started: list[tuple[str, int]] = []
        self.failing: set[str] = set()
        self._gate = threading.Semaphore(0)

    def append(self, plog: str) -> None:
        self.appended[plog] = self.appended.get(plog, 0) + 1

    def __call__(self, plog: str) -> None:
        self.started.append((plog, self.appended.get(plog, 0)))
        self._gate.acquire()
        if plog in self.failing:
            raise OSError(5, "Input/output error")

    def let_one(self) -> None:
        self._gate.release()


async def settle(until) -> None:
    """Let the loop and the flusher thread run until ``until()`` holds (a deadlock fails, not a timing)."""
    for _ in range(2000):
        if until():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the group commit stalled")


def test_requests_wait_for_an_fsync_that_started_after_their_append():
    async def scenario():
        sync = GatedSync()
        commit = GroupCommit(sync)

        def produce(plog: str) -> asyncio.Task:
            sync.append(plog)
            return asyncio.ensure_future(commit.durable([plog]))

        first = produce("a")
        await settle(lambda: len(sync.started) == 1)        # round 1 fsyncs a (1 append)
        later = [produce("a"), produce("b"), produce("a"), produce("b")]
        await asyncio.sleep(0.01)
        assert not first.done() and not any(t.done() for t in later)   # nothing before its fsync

        sync.let_one()                                       # round 1 completes
        await settle(first.done)
        assert first.result() == {}
        # a's fsync of round 1 started before the later appends to a: they wait for round 2,
        # which fsyncs a and b at once.
        await settle(lambda: len(sync.started) == 3)
        assert not any(t.done() for t in later)
        sync.let_one()                                       # one of them completes
        await asyncio.sleep(0.01)
        assert not any(t.done() for t in later)              # the round has not: still nobody
        sync.let_one()
        await settle(lambda: all(t.done() for t in later))
        # Two fsyncs (a, b) answered four requests, each fsync starting after every append it covers.
        assert sync.started[0] == ("a", 1) and sorted(sync.started[1:]) == [("a", 3), ("b", 2)]
        assert commit.rounds == 2
        commit.close()

    asyncio.run(scenario())


def test_a_failed_fsync_is_reported_to_the_requests_it_covered_only():
    async def scenario():
        sync = GatedSync()
        sync.failing.add("bad")
        commit = GroupCommit(sync)
        requests = [asyncio.ensure_future(commit.durable(logs)) for logs in (["good"], ["bad", "good"], ["bad"])]
        for _ in range(3):   # round 1: good; round 2: bad (good again, for the second request)
            sync.let_one()
        await settle(lambda: all(t.done() for t in requests))
        first, second, third = (t.result() for t in requests)
        assert first == {}
        assert set(second) == {"bad"} and isinstance(second["bad"], OSError)
        assert set(third) == {"bad"}
        # A later request is covered by a later round, which may succeed.
        sync.failing.clear()
        again = asyncio.ensure_future(commit.durable(["bad"]))
        sync.let_one()
        assert await again == {}
        commit.close()

    asyncio.run(scenario())


def batch(value: bytes) -> bytearray:
    return bytearray(encode_batch([Record(0, 1_000, None, value)]))


def test_log_appends_go_on_while_its_fsync_runs(tmp_path, monkeypatch):
    """The fsync runs outside the log's lock: an append made meanwhile is not blocked, and
    not counted as durable by the flush that was already under way."""
    plog = Log.open(tmp_path / "t-0", LogConfig())
    plog.append(batch(b"before"))
    in_fsync, release = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_fsync(fd):
        in_fsync.set()
        release.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    flusher = threading.Thread(target=plog.flush)
    flusher.start()
    assert in_fsync.wait(30)
    appender = threading.Thread(target=plog.append, args=(batch(b"during"),))
    appender.start()
    appender.join(30)
    assert not appender.is_alive(), "the append waited for the fsync"
    assert plog.log_end_offset == 2
    release.set()
    flusher.join(30)
    assert plog.recovery_point == 1   # only what was appended before the flush began
    monkeypatch.setattr(os, "fsync", real_fsync)
    plog.flush()
    assert plog.recovery_point == 2
    plog.close()


def test_a_failed_log_fsync_is_tried_again(tmp_path, monkeypatch):
    plog = Log.open(tmp_path / "t-0", LogConfig(index_interval_bytes=1))
    for i in range(3):
        plog.append(batch(b"%d" % i))

    def failing_fsync(fd):
        raise OSError(5, "Input/output error")

    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        plog.flush()
    assert plog.recovery_point == 0
    synced = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    plog.flush()
    assert plog.recovery_point == 3
    assert len(synced) == 1   # the .log again (its indexes wait for the recovery-point checkpoint)
    plog.close()


def test_the_flush_after_a_roll_fsyncs_the_directory_once(tmp_path, monkeypatch):
    """A rolled segment's file must survive a crash as its acknowledged bytes do: its directory
    entry is fsynced by the next flush (as Kafka does), and only then."""
    plog = Log.open(tmp_path / "t-0", LogConfig())
    real_fsync, synced = os.fsync, []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(stat.S_ISDIR(os.fstat(fd).st_mode)) or real_fsync(fd))
    plog.append(batch(b"first"))
    plog.flush()
    plog.roll()
    plog.append(batch(b"second"))
    plog.flush()
    plog.append(batch(b"third"))
    plog.flush()
    assert synced == [False, False, True, False]   # the .log; the new segment's .log, then the directory; the .log
    plog.close()
