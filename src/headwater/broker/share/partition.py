"""A share-partition: the delivery state of each record of one topic-partition for one share group.

DDIA ch. 11's JMS/AMQP style on top of a log. Records from the share-partition start offset
(SPSO) to the end offset (SPEO, the first offset never handed out) are in flight, each in
one state::

    AVAILABLE --acquire--> ACQUIRED --accept--> ACKNOWLEDGED
        ^                     |  \\--reject, gap--> ARCHIVED
        |                     |
        +--release, lock expiry (delivery count < limit)
                              \\--release, lock expiry (delivery count = limit)--> ARCHIVED

Acquiring a record counts a delivery and locks it to one member for the record lock
duration; a lock that expires makes it available to the next member. The start offset
advances past every record that is ACKNOWLEDGED or ARCHIVED, and what lies before it is done.
The state machine takes its clock as an argument and reports records it archives (rejected
or exhausted: the dead-letter candidates) through ``on_archived``.

The window is a range map: sorted runs of consecutive offsets that share a state, a delivery
count and the acquisition holding them, so acquiring or acknowledging a range of records
costs O(runs), not O(records), and the persisted state is the runs themselves.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import IntEnum
from typing import Callable, NamedTuple, Sequence

from headwater.broker.clock import Clock, Timer
from headwater.protocol.errors import ErrorCode


class RecordState(IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


class AcknowledgeType(IntEnum):
    """The acknowledgement types of ShareFetch / ShareAcknowledge v1."""
    GAP = 0      # an offset with no record (a control record, a compacted gap)
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3


DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


@dataclass(slots=True)
class Run:
    """Offsets first..last in one state with one delivery count, held by one acquisition (0: none)."""
    first: int
    last: int
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member: str | None = None
    acquisition: int = 0       # an old lock's timer must not release a newer acquisition

    def __len__(self) -> int:
        return self.last - self.first + 1

    def joins(self, other: Run) -> bool:
        return (self.state == other.state and self.delivery_count == other.delivery_count
                and self.member == other.member and self.acquisition == other.acquisition)


@dataclass(frozen=True)
class InFlight:
    """One offset's delivery state, as ``SharePartition.records`` shows it."""
    state: RecordState
    delivery_count: int
    member: str | None


class Acquired(NamedTuple):
    """A run of consecutive offsets acquired together, as ShareFetch's AcquiredRecords reports them
    (a tuple: the response encoder packs it as it is)."""
    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class Undo:
    """What one ``acknowledge`` changed, for ``roll_back`` should its state write fail."""
    resets: int               # reset_to / move_to since leave nothing to put back
    start_offset: int
    front: list[Run]          # copies of the runs from the start offset to the last offset acknowledged
    acknowledged: list[Run]   # copies of the runs acknowledged, as they were
    archived: int             # records it archived


class AcknowledgeError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


# Called with (offset, delivery count, why) for each record archived by a reject or by exhaustion.
OnArchived = Callable[[int, int, str], None]


# The in-flight bound (Kafka's group.share.partition.max.record.locks), as Kafka applies it: new
# records are acquired only while fewer offsets than this are in flight, no more than fit, and the
# fetch rounds that up to the end of a log batch, so the window passes it by at most one batch. A
# member that acquires and never acknowledges cannot make the window, and its persisted state,
# grow without end; a batch larger than the bound is still sent once.
MAX_IN_FLIGHT = 2000


def _first(run: Run) -> int:
    return run.first


class SharePartition:
    def __init__(self, clock: Clock, start_offset: int, *, lock_duration_ms: int, delivery_count_limit: int,
                 on_archived: OnArchived = lambda offset, count, why: None, on_change: Callable[[], None] = lambda: None):
        self.clock = clock
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.runs: list[Run] = []      # cover [start_offset, end_offset) exactly, in order, neighbours unlike
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.on_archived = on_archived
        self.on_change = on_change                # state worth persisting changed (lock expiry)
        self.archived_total = 0      # records archived since the share-partition began
        self.dead_lettered = 0       # of which written to the dead-letter topic
        self._acquisitions = 0
        self._resets = 0      # reset_to and move_to calls that cut the window
        self._locks: dict[int, tuple[Timer, int]] = {}   # acquisition -> (its lock timer, records it still holds)

    # -- the range map ----------------------------------------------------------------------

    def _split(self, offset: int) -> int:
        """Start a run at ``offset`` (start_offset <= offset <= end_offset); its index."""
        if offset >= self.end_offset:
            return len(self.runs)
        i = bisect_right(self.runs, offset, key=_first) - 1
        run = self.runs[i]
        if run.first == offset:
            return i
        self.runs.insert(i + 1, Run(offset, run.last, run.state, run.delivery_count, run.member, run.acquisition))
        run.last = offset - 1
        return i + 1

    def _slice(self, first: int, last: int) -> list[Run]:
        """The runs that cover exactly first..last, split off their neighbours."""
        i = self._split(first)
        return self.runs[i:self._split(last + 1)]

    def _coalesce(self) -> None:
        merged: list[Run] = []
        for run in self.runs:
            if merged and merged[-1].joins(run):
                merged[-1].last = run.last
            else:
                merged.append(run)
        self.runs = merged

    def load(self, start: int, end: int, ranges: Iterable[tuple[int, int, int, int]]) -> None:
        """Put persisted (first, last, state, delivery count) ranges back: the acquired ones are
        available again (their locks died with the broker), keeping their delivery counts."""
        self.move_to(start)
        self.end_offset = max(end, start)
        self.runs = [Run(start, end - 1)] if end > start else []
        for first, last, state, count in ranges:
            first, last = max(int(first), start), min(int(last), end - 1)   # a range outside the window is stale
            kind = RecordState(state)
            for run in self._slice(first, last) if first <= last else ():
                run.state = kind if kind in DONE else RecordState.AVAILABLE
                run.delivery_count = int(count)
        self._coalesce()

    # -- acquisition ------------------------------------------------------------------------

    def first_acquirable(self) -> int:
        """The lowest offset ``acquire`` would hand out next: a redelivery, else the end offset."""
        return next((run.first for run in self.runs if run.state == RecordState.AVAILABLE), self.end_offset)

    def offset_after(self, count: int) -> int:
        """The offset past the first ``count`` records a fetch may take (redeliveries, then new
        records, no more of those than the in-flight bound has room for): a log read for them need
        not reach further, and the fetch rounds it up to a batch end. (Under read_committed the
        aborted records ``acquire`` archives on the way do not count, so a read may need more.)"""
        past = self.end_offset       # past the last redelivery, when no new record may follow
        for run in self.runs:
            if run.state == RecordState.AVAILABLE:
                if count <= len(run):
                    return run.first + count
                count, past = count - len(run), run.last + 1
        fresh = min(count, self._room())
        return self.end_offset + fresh if fresh else past

    def _room(self) -> int:
        """How many new records the in-flight bound still admits."""
        return max(MAX_IN_FLIGHT - (self.end_offset - self.start_offset), 0)

    def acquire(self, member: str, max_records: int, until: int,
                aborted: Sequence[tuple[int, int]] = ()) -> list[Acquired]:
        """Lock up to ``max_records`` records below ``until`` for ``member``: redeliveries first
        (lowest offsets), then records past the end offset, those only if the in-flight bound has
        room (how many is the caller's: ``offset_after`` rounded up to a batch end). ``until`` is
        the log end, or less: the last stable offset, the end of what fits in the fetch's bytes or
        records. Offsets in an ``aborted`` range (first, last) are archived as they are reached,
        never delivered (read_committed). Every acquired record counts a delivery."""
        taken: list[Run] = []
        left, i = max_records, 0
        while left > 0 and i < len(self.runs) and self.runs[i].first < until:
            run = self.runs[i]
            if run.state == RecordState.AVAILABLE:
                self._split(min(run.last, until - 1, run.first + left - 1) + 1)
                taken.append(run)
                left -= len(run)
            i += 1
        taken += self._extend(left, until, aborted)
        if not taken:
            return []
        self._acquisitions += 1
        self._locks[self._acquisitions] = (
            self.clock.after(self.lock_duration_ms, self._lock_expired, self._acquisitions), sum(map(len, taken)))
        acquired: list[Acquired] = []
        for run in taken:
            run.state, run.member, run.acquisition = RecordState.ACQUIRED, member, self._acquisitions
            run.delivery_count += 1
            previous = acquired[-1] if acquired else None
            if previous and previous.last_offset == run.first - 1 and previous.delivery_count == run.delivery_count:
                acquired[-1] = Acquired(previous.first_offset, run.last, run.delivery_count)
            else:
                acquired.append(Acquired(run.first, run.last, run.delivery_count))
        self._coalesce()
        return acquired

    def _extend(self, left: int, until: int, aborted: Sequence[tuple[int, int]]) -> list[Run]:
        """Grow the window past the end offset by up to ``left`` records to deliver (the aborted
        ones archived on the way): the new runs to acquire."""
        fresh: list[Run] = []
        offset, window_end = self.end_offset, until if self._room() else self.end_offset
        skipped = False
        while left > 0 and offset < window_end:
            skip = next((last for first, last in aborted if first <= offset <= last), None)
            if skip is not None:
                run = Run(offset, min(skip, window_end - 1), RecordState.ARCHIVED)
                self.archived_total += len(run)
                skipped = True
            else:
                next_aborted = min((first for first, _ in aborted if first > offset), default=window_end)
                run = Run(offset, min(next_aborted, window_end, offset + left) - 1)
                fresh.append(run)
                left -= len(run)
            self.runs.append(run)
            offset = run.last + 1
        self.end_offset = offset
        if skipped:
            self._advance()
        return fresh

    def _unlock(self, run: Run) -> None:
        """``run`` leaves its acquisition: the lock's timer is cancelled once it holds nothing."""
        if run.state != RecordState.ACQUIRED:
            return
        timer, held = self._locks.pop(run.acquisition, (None, 0))
        if held > len(run):
            self._locks[run.acquisition] = (timer, held - len(run))
        elif timer is not None:
            timer.cancel()
        run.member, run.acquisition = None, 0

    def _lock_expired(self, acquisition: int) -> None:
        self._locks.pop(acquisition, None)
        expired = [run for run in self.runs if run.state == RecordState.ACQUIRED and run.acquisition == acquisition]
        for run in expired:
            run.member, run.acquisition = None, 0
            self._release(run, "delivery count limit reached (acquisition lock expired)")
        if expired:
            self._coalesce()
            self._advance()
            self.on_change()

    def release_member(self, member: str) -> int:
        """A member left: its acquired records are available again at once. Returns how many."""
        released = [run for run in self.runs if run.state == RecordState.ACQUIRED and run.member == member]
        for run in released:
            self._unlock(run)
            self._release(run, "delivery count limit reached (member left)")
        self._coalesce()
        self._advance()
        return sum(len(run) for run in released)

    def _release(self, run: Run, why: str) -> None:
        if run.delivery_count >= self.delivery_count_limit:
            self._archive(run, why)
        else:
            run.state = RecordState.AVAILABLE

    def _archive(self, run: Run, why: str | None) -> None:
        run.state = RecordState.ARCHIVED
        self.archived_total += len(run)
        if why is not None:
            for offset in range(run.first, run.last + 1):
                self.on_archived(offset, run.delivery_count, why)

    # -- acknowledgement --------------------------------------------------------------------

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]]) -> Undo:
        """Apply acknowledgement batches (first offset, last offset, types) of one member, in
        ascending order without overlaps; what ``roll_back`` needs to undo them is returned.

        All or nothing: every offset must be acquired by this member, else AcknowledgeError
        (INVALID_RECORD_STATE; INVALID_REQUEST for a malformed batch) and nothing changes."""
        plan: list[tuple[int, int, AcknowledgeType]] = []     # (first, last, type) pieces, in order
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                       f"malformed acknowledgement batch {first}-{last} with {len(types)} type(s)")
            if plan and first <= plan[-1][1]:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                       f"acknowledgement batch {first}-{last} overlaps or precedes the one before")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type in {types}") from None
            self._check_held(member, first, last)
            if len(kinds) == 1:
                plan.append((first, last, kinds[0]))
                continue
            for offset, kind in zip(range(first, last + 1), kinds):
                if plan and plan[-1][2] == kind and plan[-1][1] == offset - 1:
                    plan[-1] = (plan[-1][0], offset, kind)
                else:
                    plan.append((offset, offset, kind))
        acknowledged = [replace(run) for first, last, _ in plan for run in self._slice(first, last)]
        front = [replace(run) for run in self.runs[:self._split(plan[-1][1] + 1)]] if plan else []
        start, archived = self.start_offset, self.archived_total
        for first, last, kind in plan:
            for run in self._slice(first, last):
                self._unlock(run)
                if kind == AcknowledgeType.ACCEPT:
                    run.state = RecordState.ACKNOWLEDGED
                elif kind == AcknowledgeType.RELEASE:
                    self._release(run, "delivery count limit reached (released)")
                else:   # a GAP has no record: nothing to dead-letter
                    self._archive(run, "rejected by the consumer" if kind == AcknowledgeType.REJECT else None)
        self._coalesce()
        self._advance()
        return Undo(self._resets, start, front, acknowledged, self.archived_total - archived)

    def roll_back(self, undo: Undo) -> None:
        """Undo an acknowledgement whose state write failed, as Kafka does: its records are acquired
        by their member again (under their lock, or a new one of the full duration if it is gone),
        and the start offset is back where it was. Records it released that were acquired again
        since (their delivery count grew) stay as they are. Records other members settled since
        count as acknowledged. (Dead letters of records it rejected stay written.)"""
        if undo.resets != self._resets or not undo.acknowledged:   # gone from the log, forgotten; or nothing
            return
        if self.start_offset > undo.start_offset:   # open the window's front again: done records, and the undone
            front = [Run(run.first, min(run.last, self.start_offset - 1),
                         run.state if run.state in DONE else RecordState.ACKNOWLEDGED, run.delivery_count)
                     for run in undo.front if run.first < self.start_offset]
            if front[-1].last < self.start_offset - 1:      # acknowledged by other members since
                front.append(Run(front[-1].last + 1, self.start_offset - 1, RecordState.ACKNOWLEDGED))
            self.runs[:0] = front
            self.start_offset = undo.start_offset
        for was in undo.acknowledged:
            for run in self._slice(was.first, was.last):
                if run.state != RecordState.ACQUIRED and run.delivery_count == was.delivery_count:
                    run.state, run.delivery_count, run.member, run.acquisition = (
                        was.state, was.delivery_count, was.member, was.acquisition)
                    self._relock(run)
        self.archived_total -= undo.archived
        self._coalesce()
        self._advance()

    def _relock(self, run: Run) -> None:
        """``run`` is back in its acquisition: lock it, with a new timer if the old one is gone."""
        timer, held = self._locks.get(run.acquisition, (None, 0))
        if timer is None:
            timer = self.clock.after(self.lock_duration_ms, self._lock_expired, run.acquisition)
        self._locks[run.acquisition] = (timer, held + len(run))

    def _check_held(self, member: str, first: int, last: int) -> None:
        held = self.start_offset <= first and last < self.end_offset
        i = bisect_right(self.runs, first, key=_first) - 1 if held else 0
        while held and i < len(self.runs) and self.runs[i].first <= last:
            run = self.runs[i]
            held = run.state == RecordState.ACQUIRED and run.member == member
            i += 1
        if not held:
            raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                   f"offsets {first}-{last} are not all acquired by member {member}")

    def _advance(self) -> None:
        """Move the start offset past every done record at the front of the in-flight window."""
        done = next((i for i, run in enumerate(self.runs) if run.state not in DONE), len(self.runs))
        if done:
            del self.runs[:done]
            self.start_offset = self.runs[0].first if self.runs else self.end_offset

    def reset_to(self, offset: int) -> None:
        """Records before ``offset`` are gone from the log (retention, DeleteRecords): skip them."""
        if offset <= self.start_offset:
            return
        self._resets += 1
        cut = self._split(min(offset, self.end_offset))
        for run in self.runs[:cut]:
            self._unlock(run)
        del self.runs[:cut]
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)
        self._advance()      # done records may now lead the window

    def move_to(self, offset: int) -> None:
        """An operator's reset of an empty group (AlterShareGroupOffsets), backwards or forwards:
        delivery starts again at ``offset``, and what was in flight is forgotten."""
        for timer, _ in self._locks.values():
            timer.cancel()
        self._locks.clear()
        self._resets += 1
        self.runs = []
        self.start_offset = self.end_offset = offset

    # -- observation --------------------------------------------------------------------------

    @property
    def records(self) -> dict[int, InFlight]:
        """Every offset in flight with its state, one by one (for tests and inspection: O(records))."""
        return {offset: InFlight(run.state, run.delivery_count, run.member)
                for run in self.runs for offset in range(run.first, run.last + 1)}

    def lag(self, end: int) -> int:
        """The records from the start offset up to ``end`` (the high watermark) not yet delivered for good."""
        done = sum(min(run.last, end - 1) - run.first + 1 for run in self.runs if run.state in DONE and run.first < end)
        return max(end - self.start_offset - done, 0)

    def count(self, state: RecordState) -> int:
        return sum(len(run) for run in self.runs if run.state == state)
