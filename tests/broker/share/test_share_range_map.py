"""The share-partition's range map against a plain-Python model that keeps one entry per offset,
on random sequences of acquisitions, acknowledgements (some rolled back later, their state
write failed), lock expiries, members leaving and log truncation: the same records in the same
states, the same runs handed out, the same records archived, and the persisted runs restore to
what a restart must keep. The in-flight bound is lowered so that the sequences reach it."""
from __future__ import annotations

import random

import pytest

from headwater.broker.share import partition
from headwater.broker.share.partition import AcknowledgeError, Acquired, RecordState as S, SharePartition, Undo
from headwater.broker.share.store import _partition_value, restore

from tests.support.clock import ManualClock

LOCK_MS, LIMIT, MEMBERS = 1_000, 3, ("a", "b", "c")
BOUND = 60          # the in-flight bound the random sequences run with (MAX_IN_FLIGHT's stand-in)
DONE = (S.ACKNOWLEDGED, S.ARCHIVED)


class Model:
    """One dict entry per offset in flight: offset -> [state, delivery count, member, acquisition]."""

    def __init__(self, start: int):
        self.start = self.end = start
        self.records: dict[int, list] = {}
        self.deadlines: dict[int, int] = {}      # acquisition -> when its lock expires
        self.acquisitions = self.now = self.archived_total = self.resets = 0
        self.archived: list[tuple[int, int]] = []

    def _advance(self) -> None:
        while self.start < self.end and self.records[self.start][0] in DONE:
            del self.records[self.start]
            self.start += 1

    def _release(self, offset: int) -> None:
        record = self.records[offset]
        record[2] = record[3] = None
        if record[1] >= LIMIT:
            self._archive(offset)
        else:
            record[0] = S.AVAILABLE

    def _archive(self, offset: int, dead_letter: bool = True) -> None:
        self.records[offset][0] = S.ARCHIVED
        self.archived_total += 1
        if dead_letter:
            self.archived.append((offset, self.records[offset][1]))

    def acquire(self, member: str, max_records: int, until: int, aborted) -> list[Acquired]:
        offsets = [o for o in sorted(self.records) if self.records[o][0] == S.AVAILABLE and o < until][:max_records]
        room = self.end - self.start < BOUND       # new records only while fewer are in flight
        while room and len(offsets) < max_records and self.end < until:
            self.records[self.end] = [S.AVAILABLE, 0, None, None]
            if any(first <= self.end <= last for first, last in aborted):
                self._archive(self.end, dead_letter=False)
            else:
                offsets.append(self.end)
            self.end += 1
        self._advance()
        if not offsets:
            return []
        self.acquisitions += 1
        self.deadlines[self.acquisitions] = self.now + LOCK_MS
        runs: list[list[int]] = []
        for o in offsets:
            record = self.records[o]
            record[0], record[2], record[3] = S.ACQUIRED, member, self.acquisitions
            record[1] += 1
            if runs and runs[-1][1] == o - 1 and runs[-1][2] == record[1]:
                runs[-1][1] = o
            else:
                runs.append([o, o, record[1]])
        return [Acquired(*run) for run in runs]

    def acknowledge(self, member: str, batches) -> tuple | None:
        """None, changing nothing, if any offset is not acquired by ``member``; else what
        ``roll_back`` needs: (resets, start, the records up to the last one acknowledged, the
        offsets acknowledged, how many it archived)."""
        offsets = [o for first, last, _ in batches for o in range(first, last + 1)]
        if any(self.records.get(o, [None, 0, None])[:3:2] != [S.ACQUIRED, member] for o in offsets):
            return None
        undo = (self.resets, self.start, {o: list(r) for o, r in self.records.items() if o <= max(offsets, default=-1)},
                offsets)
        archived_total = self.archived_total
        for first, last, types in batches:
            for o, kind in zip(range(first, last + 1), types * (last - first + 1) if len(types) == 1 else types):
                if kind == 2:
                    self._release(o)
                    continue
                self.records[o][2] = self.records[o][3] = None
                if kind == 1:
                    self.records[o][0] = S.ACKNOWLEDGED
                else:
                    self._archive(o, dead_letter=kind == 3)
        self._advance()
        return (*undo, self.archived_total - archived_total)

    def roll_back(self, undo: tuple) -> None:
        """The acknowledgement's records untouched since (not acquired again: same delivery count)
        acquired by their member again; the start offset back, what others settled meanwhile acknowledged."""
        resets, start, before, offsets, archived = undo
        if resets != self.resets or not offsets:
            return
        for o in range(start, self.start):
            state, count = before[o][:2] if o in before else (S.ACKNOWLEDGED, 0)
            self.records[o] = [state if state in DONE else S.ACKNOWLEDGED, count, None, None]
        self.start = min(self.start, start)
        restored = [o for o in offsets if self.records[o][0] != S.ACQUIRED and self.records[o][1] == before[o][1]]
        locked = {r[3] for r in self.records.values() if r[0] == S.ACQUIRED}
        for acquisition in {before[o][3] for o in restored} - locked:    # its lock was gone: a new one
            self.deadlines[acquisition] = self.now + LOCK_MS
        for o in restored:
            self.records[o] = list(before[o])
        self.archived_total -= archived
        self._advance()

    def advance_clock(self, ms: int) -> None:
        self.now += ms
        for acquisition in sorted(a for a, due in self.deadlines.items() if due <= self.now):
            del self.deadlines[acquisition]
            for o in sorted(self.records):
                if self.records[o][0] == S.ACQUIRED and self.records[o][3] == acquisition:
                    self._release(o)
        self._advance()

    def release_member(self, member: str) -> None:
        for o in sorted(self.records):
            if self.records[o][0] == S.ACQUIRED and self.records[o][2] == member:
                self._release(o)
        self._advance()

    def reset_to(self, offset: int) -> None:
        if offset > self.start:
            self.resets += 1
            self.records = {o: r for o, r in self.records.items() if o >= offset}
            self.start, self.end = offset, max(self.end, offset)
            self._advance()

    def view(self) -> dict[int, tuple]:
        return {o: (r[0], r[1], r[2]) for o, r in sorted(self.records.items())}


def _batches(rng: random.Random, model: Model, member: str) -> list:
    """Ascending acknowledgement batches over the member's acquired offsets; now and then a wrong one."""
    held = [o for o in sorted(model.records) if model.records[o][0] == S.ACQUIRED and model.records[o][2] == member]
    if rng.random() < 0.1:
        held.append(rng.randrange(model.start, model.end + 3))       # not (all) held: all or nothing
        held = sorted(set(held))
    batches, i = [], 0
    while i < len(held):
        j = i
        while j + 1 < len(held) and held[j + 1] == held[j] + 1 and rng.random() < 0.9:
            j += 1
        first, last = held[i], held[j]
        if rng.random() < 0.5:
            batches.append((first, last, [rng.choice((1, 1, 1, 2, 3, 0))]))
        else:
            batches.append((first, last, [rng.choice((1, 1, 2, 3, 0)) for _ in range(last - first + 1)]))
        i = j + 1 + (rng.random() < 0.3)     # now and then leave one unacknowledged
    return batches


def _check(sp: SharePartition, model: Model, clock: ManualClock) -> None:
    assert (sp.start_offset, sp.end_offset, sp.archived_total) == (model.start, model.end, model.archived_total)
    assert {o: (r.state, r.delivery_count, r.member) for o, r in sp.records.items()} == model.view()
    for before, after in zip(sp.runs, sp.runs[1:]):           # contiguous, and no two neighbours alike
        assert after.first == before.last + 1 and not before.joins(after)
    if sp.runs:
        assert (sp.runs[0].first, sp.runs[-1].last + 1) == (sp.start_offset, sp.end_offset)
    # Locks: one live timer per acquisition that still holds records, none left behind.
    holding = {r[3] for r in model.records.values() if r[0] == S.ACQUIRED}
    assert sum(1 for timer in clock._timers if not timer.cancelled) == len(holding)
    # How far a log read must reach for n records: the n-th available offset, then new ones past the
    # end, as many as the in-flight bound has room for.
    available = [o for o in sorted(model.records) if model.records[o][0] == S.AVAILABLE]
    room = max(model.start + BOUND - model.end, 0)
    for n in (1, 3, 50, BOUND + 1):
        fresh = min(n - len(available), room)
        assert sp.offset_after(n) == (available[n - 1] + 1 if n <= len(available) else model.end + fresh if fresh
                                      else available[-1] + 1 if available else model.end)
    # What a restart keeps: the persisted runs, acquired records available again.
    restarted = SharePartition(clock, 0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT)
    restore(restarted, _partition_value(sp))
    assert {o: (r.state, r.delivery_count) for o, r in restarted.records.items()} == {
        o: (S.AVAILABLE if state == S.ACQUIRED else state, count) for o, (state, count, _) in model.view().items()}


@pytest.mark.parametrize("seed", range(25))
def test_the_range_map_behaves_as_one_entry_per_offset(seed, monkeypatch):
    monkeypatch.setattr(partition, "MAX_IN_FLIGHT", BOUND)
    rng = random.Random(seed)
    clock = ManualClock()
    archived: list[tuple[int, int]] = []
    start = rng.randrange(0, 50)
    sp = SharePartition(clock, start, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT,
                        on_archived=lambda offset, count, why: archived.append((offset, count)))
    model = Model(start)
    log_end = start
    pending: list[tuple[Undo, tuple]] = []      # acknowledgements whose state write is still "running"
    for _ in range(120):
        op = rng.random()
        member = rng.choice(MEMBERS)
        if op < 0.35:
            log_end += rng.randrange(0, 40)
            until = rng.randrange(model.start, log_end + 1)
            aborted = [] if rng.random() < 0.7 else [(o, o + rng.randrange(0, 5)) for o in
                                                     rng.sample(range(model.end, log_end + 5), 2)]
            max_records = rng.choice((1, 3, 10, 500))
            assert sp.acquire(member, max_records, until, aborted) == model.acquire(member, max_records, until, aborted)
        elif op < 0.75:
            batches = _batches(rng, model, member)
            try:
                undo = sp.acknowledge(member, batches)
            except AcknowledgeError:
                undo = None
            model_undo = model.acknowledge(member, batches)
            assert (undo is None) == (model_undo is None)
            if undo is not None and rng.random() < 0.3:
                pending.append((undo, model_undo))
        elif op < 0.8:
            if pending:      # its write failed
                undo, model_undo = pending.pop(rng.randrange(len(pending)))
                sp.roll_back(undo)
                model.roll_back(model_undo)
        elif op < 0.9:
            ms = rng.choice((LOCK_MS // 3, LOCK_MS, 2 * LOCK_MS))
            clock.advance(ms)
            model.advance_clock(ms)
        elif op < 0.97:
            sp.release_member(member)
            model.release_member(member)
        else:
            offset = rng.randrange(model.start, model.end + 3)
            sp.reset_to(offset)
            model.reset_to(offset)
            log_end = max(log_end, offset)
        assert sorted(archived) == sorted(model.archived)
        _check(sp, model, clock)


def test_five_hundred_records_acquired_and_accepted_are_one_run_each_way(clock):
    sp = SharePartition(clock, 0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT)
    for round_ in range(4):
        assert sp.acquire("a", 500, until=10_000) == [Acquired(500 * round_, 500 * round_ + 499, 1)]
        assert len(sp.runs) == 1 and len(_partition_value(sp)["ranges"]) == 1
        sp.acknowledge("a", [(500 * round_, 500 * round_ + 499, [1])])
        assert (sp.runs, sp.start_offset) == ([], 500 * (round_ + 1))
    assert not [timer for timer in clock._timers if not timer.cancelled]
