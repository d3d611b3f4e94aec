"""The fetch-session cache (KIP-227) stepped in-process: sessions opened, continued, refused,
closed and evicted, and what each response carries, against Kafka's rules."""
import asyncio
import itertools
from typing import NamedTuple

import pytest

from headwater.broker.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, MAX_EPOCH, NO_SESSION, FetchSessionCache
from headwater.broker.wakeups import GrowthSignals, Watch
from headwater.protocol.errors import ErrorCode


class FetchPosition(NamedTuple):
    fetch_offset: int
    partition_max_bytes: int


class PartitionNews(NamedTuple):
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def wanted(*partitions, offset=0):
    return [(p, FetchPosition(offset, 1024)) for p in partitions]


def quiet(hw=10, error=ErrorCode.NONE):
    return PartitionNews(error, hw, hw, 0, b"")


def with_records(hw=10):
    return PartitionNews(ErrorCode.NONE, hw, hw, 0, b"batch")


@pytest.fixture
def cache(clock):
    ids = itertools.count(101)
    return FetchSessionCache(clock, max_slots=2, eviction_ms=1000, new_id=lambda: next(ids))


def open_session(cache, *partitions, news=None):
    """A full fetch with epoch 0; returns the new session's id."""
    context = cache.context(NO_SESSION, INITIAL_EPOCH, wanted(*partitions))
    assert cache.answer(context, news or {p: quiet() for p in partitions}) == list(partitions)
    return context.session_id


def incremental(cache, session_id, epoch, news, add=(), forget=()):
    context = cache.context(session_id, epoch, wanted(*add, offset=5), forget)
    assert context.error == ErrorCode.NONE and context.session_id == session_id
    return context, cache.answer(context, {p: news.get(p, quiet()) for p, _ in context.targets})


def test_a_full_fetch_opens_a_session_and_quiet_partitions_are_then_left_out(cache):
    session_id = open_session(cache, A0, A1, B0)
    assert session_id == 101 and len(cache) == 1 and cache.partitions_cached == 3
    context, answered = incremental(cache, session_id, 1, {})
    assert [p for p, _ in context.targets] == [A0, A1, B0] and answered == []
    # records, a moved high watermark, a moved log start, and an error are news; the rest is not
    now = {A0: quiet(), A1: with_records(), B0: quiet(hw=11)}
    assert incremental(cache, session_id, 2, now)[1] == [A1, B0]
    now.update({A1: quiet(), A0: PartitionNews(ErrorCode.NONE, 10, 10, 4, b"")})
    assert incremental(cache, session_id, 3, now)[1] == [A0]
    now[A0] = quiet(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
    assert incremental(cache, session_id, 4, now)[1] == [A0]
    assert incremental(cache, session_id, 5, now)[1] == [A0]          # told again while it lasts
    now[A0] = quiet()
    assert incremental(cache, session_id, 6, now)[1] == [A0]          # and once more when it clears
    assert incremental(cache, session_id, 7, now)[1] == []
    assert cache.stats.fetches == {"incremental": 7, "full": 1}


def test_answered_partitions_go_to_the_back_so_none_starves(cache):
    session_id = open_session(cache, A0, A1, B0)
    incremental(cache, session_id, 1, {A0: with_records()})
    context, _ = incremental(cache, session_id, 2, {})
    assert [p for p, _ in context.targets] == [A1, B0, A0]


def test_incremental_fetches_add_update_and_forget_partitions(cache):
    session_id = open_session(cache, A0, A1)
    context, answered = incremental(cache, session_id, 1, {}, add=[A1, B0], forget=[A0])
    assert dict(context.targets) == {A1: FetchPosition(5, 1024), B0: FetchPosition(5, 1024)}
    assert answered == [B0]          # new to the session: its offsets were never sent
    context, _ = incremental(cache, session_id, 2, {})
    assert dict(context.targets)[A1] == FetchPosition(5, 1024)   # the moved offset stays
    # forgetting every partition ends the session: the fetch is answered without one
    context = cache.context(session_id, 3, [], [A1, B0])
    assert context.session is None and cache.answer(context, {}) == [] and context.session_id == NO_SESSION
    assert len(cache) == 0


def test_wrong_epoch_and_unknown_session_are_refused(cache):
    session_id = open_session(cache, A0)
    assert cache.context(session_id, 2, []).error == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.context(999, 1, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert incremental(cache, session_id, 1, {})[1] == []   # a refused fetch does not move the epoch
    assert dict(cache.stats.errors) == {"INVALID_FETCH_SESSION_EPOCH": 1, "FETCH_SESSION_ID_NOT_FOUND": 1}


def test_final_epoch_closes_the_session_and_opens_none(cache):
    session_id = open_session(cache, A0)
    context = cache.context(session_id, FINAL_EPOCH, wanted(A0))
    assert cache.answer(context, {A0: quiet()}) == [A0] and context.session_id == NO_SESSION
    assert len(cache) == 0
    assert cache.context(session_id, 1, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_full_fetch_naming_its_session_replaces_it(cache):
    old = open_session(cache, A0)
    context = cache.context(old, INITIAL_EPOCH, wanted(A0, A1))
    cache.answer(context, {A0: quiet(), A1: quiet()})
    assert context.session_id not in (old, NO_SESSION) and len(cache) == 1
    assert cache.context(old, 1, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_full_cache_gives_way_to_larger_sessions_and_idle_ones_only(cache, clock):
    small, other = open_session(cache, A0), open_session(cache, A0, A1)
    assert open_session(cache, B0) == NO_SESSION              # no smaller session to take the place of
    larger = open_session(cache, A0, A1, B0)                  # the smallest (one partition) gives way
    assert cache.context(small, 1, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.stats.evictions == 1 and len(cache) == 2
    clock.advance(500)
    incremental(cache, larger, 1, {})
    clock.advance(600)                                        # `other` idle 1,100 ms, past eviction_ms
    assert open_session(cache, B0) not in (NO_SESSION, other)
    assert cache.context(other, 1, []).error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(larger, 2, []).error == ErrorCode.NONE
    assert cache.stats.evictions == 2


def test_no_slots_means_no_sessions(clock):
    cache = FetchSessionCache(clock, max_slots=0)
    assert open_session(cache, A0) == NO_SESSION and len(cache) == 0


def test_the_epoch_wraps_to_one(cache):
    session_id = open_session(cache, A0)
    cache._sessions[session_id].epoch = MAX_EPOCH
    incremental(cache, session_id, MAX_EPOCH, {})
    assert incremental(cache, session_id, 1, {})[1] == []


def test_a_session_never_holds_more_partitions_than_the_broker_has_room_for(clock):
    cache = FetchSessionCache(clock, max_size=2)
    assert open_session(cache, A0, A1, B0) == NO_SESSION      # too many to keep: fetched without a session
    session_id = open_session(cache, A0, A1)
    context = cache.context(session_id, 1, wanted(("ghost", 0)))
    assert context.error == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and len(cache) == 0


# --- an idle session reads only what changed (issue 20: one idle consumer on 2,000 partitions) ---

@pytest.fixture
def signals():
    return GrowthSignals()


@pytest.fixture
def watched_cache(clock, signals):
    ids = itertools.count(101)
    return FetchSessionCache(clock, max_slots=2, eviction_ms=1000, new_id=lambda: next(ids), signals=signals)


def caught_up(cache, *partitions):
    """A session whose consumer sits at the end (offset 10 = high watermark) of every partition."""
    context = cache.context(NO_SESSION, INITIAL_EPOCH, wanted(*partitions, offset=10))
    cache.answer(context, {p: quiet() for p in partitions})
    return context.session_id


def step(cache, session_id, epoch, news, add=()):
    context = cache.context(session_id, epoch, wanted(*add, offset=10))
    return [p for p, _ in context.targets], cache.answer(context, {p: news.get(p, quiet()) for p, _ in context.targets})


def test_an_idle_session_reads_only_partitions_that_changed_were_named_or_are_due(watched_cache, signals):
    session_id = caught_up(watched_cache, A0, A1, B0)
    assert step(watched_cache, session_id, 1, {}) == ([], [])          # nothing read at all
    signals.notify(*B0)                                                 # DeleteRecords: a new log start
    assert step(watched_cache, session_id, 2, {B0: PartitionNews(ErrorCode.NONE, 10, 10, 4, b"")}) == ([B0], [B0])
    assert step(watched_cache, session_id, 3, {}, add=[A1]) == ([A1], [])   # named: read, nothing new
    # an error is read (and answered) at every fetch until it clears, without any change told
    signals.notify(*A0)
    assert step(watched_cache, session_id, 4, {A0: quiet(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})[1] == [A0]
    assert step(watched_cache, session_id, 5, {A0: quiet(error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)})[1] == [A0]
    assert step(watched_cache, session_id, 6, {})[1] == [A0]
    assert step(watched_cache, session_id, 7, {}) == ([], [])
    # records the response had no room for (fetch offset 10, high watermark 12) are read again until fetched
    signals.notify(*A1)
    assert step(watched_cache, session_id, 8, {A1: quiet(hw=12)}) == ([A1], [A1])
    assert step(watched_cache, session_id, 9, {A1: quiet(hw=12)}) == ([A1], [])
    assert step(watched_cache, session_id, 10, {}, add=[A1])[0] == [A1]   # the client moved to 10 again: quiet
    assert step(watched_cache, session_id, 11, {}) == ([], [])


def test_a_read_committed_session_waiting_at_an_open_transaction_is_quiet_until_it_changes(watched_cache, signals):
    context = watched_cache.context(NO_SESSION, INITIAL_EPOCH, wanted(A0, offset=10))
    open_txn = PartitionNews(ErrorCode.NONE, 15, 10, 0, b"")   # records 10..14 are an open transaction
    watched_cache.answer(context, {A0: open_txn}, read_committed=True)
    session_id = context.session_id

    def committed_step(epoch, news):
        context = watched_cache.context(session_id, epoch, [])
        return [p for p, _ in context.targets], watched_cache.answer(context, news, read_committed=True)

    assert committed_step(1, {}) == ([], [])          # at the last stable offset: nothing to read
    signals.notify(*A0)                               # the commit marker
    assert committed_step(2, {A0: PartitionNews(ErrorCode.NONE, 16, 16, 0, b"batch")}) == ([A0], [A0])


def test_a_change_while_the_fetch_waits_is_read_in_the_session_order(watched_cache, signals):
    session_id = caught_up(watched_cache, A0, A1, B0)
    signals.notify(*B0)
    context = watched_cache.context(session_id, 1, [])
    assert [p for p, _ in context.targets] == [B0]
    signals.notify(*A0)
    watched_cache.changed(context)
    assert [p for p, _ in context.targets] == [A0, B0]
    assert watched_cache.answer(context, {A0: with_records(), B0: quiet()}) == [A0]
    signals.notify(*A0), signals.notify(*B0)
    assert step(watched_cache, session_id, 2, {})[0] == [B0, A0]         # A0 was answered last: it goes last


def test_closed_evicted_and_emptied_sessions_leave_no_registration(watched_cache, signals, clock):
    closed = caught_up(watched_cache, A0, A1)
    watched_cache.context(closed, FINAL_EPOCH, [])
    assert len(signals) == 0
    emptied = caught_up(watched_cache, A0, A1)
    watched_cache.context(emptied, 1, [], [A0, A1])
    assert len(signals) == 0 and len(watched_cache) == 0
    evicted, kept = caught_up(watched_cache, A0), caught_up(watched_cache, A0, A1)
    assert caught_up(watched_cache, A0, A1, B0) not in (NO_SESSION, evicted)   # takes the smallest's slot
    watched_cache.context(kept, INITIAL_EPOCH, [])                              # replaced by a full fetch
    assert len(signals) == 3                                                     # A0, A1, B0 of the one left
    too_big = FetchSessionCache(clock, max_size=2, signals=signals)
    session_id = caught_up(too_big, A0, A1)
    too_big.context(session_id, 1, wanted(("ghost", 0)))
    assert len(too_big) == 0 and len(signals) == 3
    forgetting = next(iter(watched_cache._sessions))
    watched_cache.context(forgetting, 1, [], [B0])
    assert len(signals) == 2


def test_a_watch_is_woken_by_a_change_made_after_it_was_armed():
    async def scenario():
        signals, watch = GrowthSignals(), Watch()
        signals.register(watch, [A0, A1])
        watch.arm()
        signals.notify(*A1)                       # as if appended while the fetch read the logs
        assert await watch.wait(5) and watch.take_changed() == {A1}
        watch.arm()
        assert not await watch.wait(0.01)         # nothing changed: the wait times out
        signals.unregister(watch, [A0, A1])
        assert len(signals) == 0
    asyncio.run(scenario())
