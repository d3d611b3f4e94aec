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
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Callable, Sequence

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


@dataclass
class InFlight:
    state: RecordState = RecordState.AVAILABLE
    delivery_count: int = 0
    member: str | None = None
    lock: Timer | None = None
    acquisition: int = 0       # which acquisition holds the lock: an old lock's timer must not release a newer one


@dataclass(frozen=True)
class Acquired:
    """A run of consecutive offsets acquired together, as ShareFetch's AcquiredRecords reports them."""
    first_offset: int
    last_offset: int
    delivery_count: int


class AcknowledgeError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


# Called with (offset, delivery count, why) for each record archived by a reject or by exhaustion.
OnArchived = Callable[[int, int, str], None]


# At most this many offsets in flight (Kafka's group.share.partition.max.record.locks): a member
# that acquires and never acknowledges cannot make the window, and its persisted state, grow without end.
MAX_IN_FLIGHT = 2000


class SharePartition:
    def __init__(self, clock: Clock, start_offset: int, *, lock_duration_ms: int, delivery_count_limit: int,
                 on_archived: OnArchived = lambda offset, count, why: None, on_change: Callable[[], None] = lambda: None):
        self.clock = clock
        self.start_offset = start_offset
        self.end_offset = start_offset
        self.records: dict[int, InFlight] = {}    # every offset in [start_offset, end_offset)
        self.lock_duration_ms = lock_duration_ms
        self.delivery_count_limit = delivery_count_limit
        self.on_archived = on_archived
        self.on_change = on_change                # state worth persisting changed (lock expiry)
        self.archived_total = 0      # records archived since the share-partition began
        self.dead_lettered = 0       # of which written to the dead-letter topic
        self._acquisitions = 0

    # -- acquisition ------------------------------------------------------------------------

    def first_acquirable(self) -> int:
        """The lowest offset ``acquire`` would hand out next: a redelivery, else the end offset."""
        return next((o for o, r in self.records.items() if r.state == RecordState.AVAILABLE), self.end_offset)

    def acquire(self, member: str, max_records: int, until: int,
                aborted: Sequence[tuple[int, int]] = ()) -> list[Acquired]:
        """Lock up to ``max_records`` records below ``until`` for ``member``: redeliveries first
        (lowest offsets), then records past the end offset. ``until`` is the log end, or less: the
        last stable offset, the end of what fits in the fetch's bytes. Offsets in an ``aborted``
        range (first, last) are archived as they are reached, never delivered (read_committed).
        Every acquired record counts a delivery."""
        offsets = [o for o, r in self.records.items() if r.state == RecordState.AVAILABLE and o < until][:max_records]
        offset, window_end, skipped = self.end_offset, min(until, self.start_offset + MAX_IN_FLIGHT), False
        while len(offsets) < max_records and offset < window_end:
            record = self.records[offset] = InFlight()
            if aborted and any(first <= offset <= last for first, last in aborted):
                self._archive(offset, record, None)
                skipped = True
            else:
                offsets.append(offset)
            offset += 1
        self.end_offset = max(self.end_offset, offset)
        if skipped:
            self._advance()
        if not offsets:
            return []
        self._acquisitions += 1
        timer = self.clock.after(self.lock_duration_ms, self._lock_expired, self._acquisitions, tuple(offsets))
        runs: list[Acquired] = []
        first = previous = count = -1      # the run being built: first offset, last offset, delivery count
        for offset in offsets:
            record = self.records[offset]
            record.state, record.member, record.lock = RecordState.ACQUIRED, member, timer
            record.acquisition = self._acquisitions
            record.delivery_count += 1
            if offset != previous + 1 or record.delivery_count != count:
                if first >= 0:
                    runs.append(Acquired(first, previous, count))
                first, count = offset, record.delivery_count
            previous = offset
        runs.append(Acquired(first, previous, count))
        return runs

    def _lock_expired(self, acquisition: int, offsets: tuple[int, ...]) -> None:
        expired = 0
        for offset in offsets:
            record = self.records.get(offset)
            if record is not None and record.state == RecordState.ACQUIRED and record.acquisition == acquisition:
                self._release(offset, record, "delivery count limit reached (acquisition lock expired)")
                expired += 1
        if expired:
            self._advance()
            self.on_change()

    def release_member(self, member: str) -> int:
        """A member left: its acquired records are available again at once. Returns how many."""
        released = 0
        for offset, record in list(self.records.items()):
            if record.state == RecordState.ACQUIRED and record.member == member:
                self._release(offset, record, "delivery count limit reached (member left)")
                released += 1
        self._advance()
        return released

    def _release(self, offset: int, record: InFlight, why: str) -> None:
        if record.lock is not None:
            record.lock.cancel()
        record.member, record.lock = None, None
        if record.delivery_count >= self.delivery_count_limit:
            self._archive(offset, record, why)
        else:
            record.state = RecordState.AVAILABLE

    def _archive(self, offset: int, record: InFlight, why: str | None) -> None:
        record.state = RecordState.ARCHIVED
        self.archived_total += 1
        if why is not None:
            self.on_archived(offset, record.delivery_count, why)

    # -- acknowledgement --------------------------------------------------------------------

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]]) -> None:
        """Apply acknowledgement batches (first offset, last offset, types) of one member.

        All or nothing: every offset must be acquired by this member, else AcknowledgeError
        (INVALID_RECORD_STATE; INVALID_REQUEST for a malformed batch) and nothing changes."""
        plan: list[tuple[int, AcknowledgeType]] = []
        for first, last, types in batches:
            if last < first or not types or (len(types) != 1 and len(types) != last - first + 1):
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST,
                                       f"malformed acknowledgement batch {first}-{last} with {len(types)} type(s)")
            try:
                kinds = [AcknowledgeType(t) for t in types]
            except ValueError:
                raise AcknowledgeError(ErrorCode.INVALID_REQUEST, f"unknown acknowledge type in {types}") from None
            for i, offset in enumerate(range(first, last + 1)):
                record = self.records.get(offset)
                if record is None or record.state != RecordState.ACQUIRED or record.member != member:
                    raise AcknowledgeError(ErrorCode.INVALID_RECORD_STATE,
                                           f"offset {offset} is not acquired by member {member}")
                plan.append((offset, kinds[0] if len(kinds) == 1 else kinds[i]))
        for offset, kind in plan:
            record = self.records[offset]
            if kind == AcknowledgeType.RELEASE:
                self._release(offset, record, "delivery count limit reached (released)")
                continue
            if record.lock is not None:
                record.lock.cancel()
            record.member, record.lock = None, None
            if kind == AcknowledgeType.ACCEPT:
                record.state = RecordState.ACKNOWLEDGED
            elif kind == AcknowledgeType.REJECT:
                self._archive(offset, record, "rejected by the consumer")
            else:  # GAP: no record there, nothing to dead-letter
                self._archive(offset, record, None)
        self._advance()

    def _advance(self) -> None:
        """Move the start offset past every done record at the front of the in-flight window."""
        while self.start_offset < self.end_offset and self.records[self.start_offset].state in DONE:
            del self.records[self.start_offset]
            self.start_offset += 1

    def reset_to(self, offset: int) -> None:
        """Records before ``offset`` are gone from the log (retention, DeleteRecords): skip them."""
        if offset <= self.start_offset:
            return
        _unlock([self.records.pop(o) for o in range(self.start_offset, min(offset, self.end_offset))])
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)

    def move_to(self, offset: int) -> None:
        """An operator's reset of an empty group (AlterShareGroupOffsets), backwards or forwards:
        delivery starts again at ``offset``, and what was in flight is forgotten."""
        _unlock(list(self.records.values()))
        self.records = {}
        self.start_offset = self.end_offset = offset

    # -- observation --------------------------------------------------------------------------

    def lag(self, end: int) -> int:
        """The records from the start offset up to ``end`` (the high watermark) not yet delivered for good."""
        done = sum(1 for o, r in self.records.items() if o < end and r.state in DONE)
        return max(end - self.start_offset - done, 0)

    def count(self, state: RecordState) -> int:
        return sum(1 for r in self.records.values() if r.state == state)


def _unlock(records: list[InFlight]) -> None:
    for record in records:
        if record.lock is not None:
            record.lock.cancel()
