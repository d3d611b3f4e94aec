"""Fetch sessions (KIP-227): a consumer names its partitions once, then only what changed.

A full fetch with epoch 0 opens a session: the broker keeps the partitions it asked for and
what it last told the client about each (high watermark, last stable offset, log start
offset). The session's next fetches (epoch 1, 2, ...) name only partitions that are new or
whose fetch offset moved, ``forgotten_topics_data`` drops some, and the response carries
only partitions with records, an error, or offsets the client has not been told yet: an
idle consumer on thousands of partitions sends and receives almost nothing. Epoch -1 asks
for no session (librdkafka always fetches so); a full fetch naming a session id closes it.

As in Kafka, sessions belong to the broker, not to a connection: a client that reconnects
goes on with its session. At most ``max_slots`` are kept
(``max.incremental.fetch.session.cache.slots``). When the cache is full a new session
takes the slot of the least recently used one if that one has been idle for
``eviction_ms`` (``min.incremental.fetch.session.eviction.ms``), else of the smallest one
if it has fewer partitions than the newcomer (Kafka's preference: keep the sessions that
save the most); otherwise the client fetches without a session. A client whose session was
evicted gets FETCH_SESSION_ID_NOT_FOUND and starts over with a full fetch.
"""
from __future__ import annotations

import secrets
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from headwater.broker.clock import Clock
from headwater.broker.wakeups import GrowthSignals, Watch
from headwater.protocol.errors import ErrorCode

NO_SESSION = 0       # the session id of a fetch (or a response) without a session
INITIAL_EPOCH = 0    # a full fetch that asks for a new session
FINAL_EPOCH = -1     # a full fetch that asks for none
MAX_EPOCH = 2**31 - 1

Partition = tuple[str, int]


class FetchPosition(Protocol):
    """What a client asks of one partition: the request's own partition entry, kept as it came."""
    fetch_offset: int
    partition_max_bytes: int


class PartitionNews(Protocol):
    """What one read of a partition found: enough to know whether the client must hear of it."""
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes


def _offsets(news: PartitionNews) -> tuple[int, int, int]:
    return news.high_watermark, news.last_stable_offset, news.log_start_offset


def _told(news: PartitionNews) -> tuple[int, int, int] | None:
    """What the session remembers once ``news`` is sent: an error is sent again until it clears."""
    return None if news.error_code else _offsets(news)


@dataclass(slots=True)
class CachedPartition:
    position: FetchPosition
    told: tuple[int, int, int] | None = None   # the offsets last sent; None: never sent
    order: int = 0                             # read (and answered) in this order: last answered, last


@dataclass
class FetchSession:
    """A session reads only what may have news: partitions the fetch names, those it must read
    again (an error, records not yet fetched) and those its Watch saw change; the others are
    quiet (what they would answer was already sent) until a change wakes the Watch."""
    id: int
    epoch: int                                  # the epoch the session's next fetch must carry
    partitions: dict[Partition, CachedPartition]
    last_used_ms: int
    watch: Watch = field(default_factory=Watch)
    unquiet: set[Partition] = field(default_factory=set)   # read at the next fetch whatever changes
    answers: int = 0                            # a counter to order partitions by when last answered

    def reorder(self, cached: CachedPartition) -> None:
        """``cached`` goes last: the others go first next time, so no partition starves."""
        self.answers += 1
        cached.order = self.answers


@dataclass
class FetchContext:
    """One fetch request seen through the cache: which partitions to read, in answer order."""
    targets: list[tuple[Partition, FetchPosition]]
    error: ErrorCode = ErrorCode.NONE
    session: FetchSession | None = None         # the session an incremental fetch continues
    wants_session: bool = False                 # a full fetch with epoch 0
    session_id: int = NO_SESSION                # what the response carries, known once answered


@dataclass
class FetchSessionStats:
    fetches: Counter = field(default_factory=Counter)   # "full" / "incremental" -> fetches of that kind
    errors: Counter = field(default_factory=Counter)    # ErrorCode name -> fetches refused with it
    evictions: int = 0
    partitions_answered_incrementally: int = 0


def next_epoch(epoch: int) -> int:
    return 1 if epoch == MAX_EPOCH else epoch + 1


def _unquiet(position: FetchPosition, news: PartitionNews, read_committed: bool) -> bool:
    """Whether a partition must be read again without a change: an error is answered until it
    clears, and records past the fetch offset (the response had no room for them) are still due.
    A read_committed fetch can read no further than the last stable offset: an open transaction
    above it is news only once its marker changes the partition."""
    readable_end = news.last_stable_offset if read_committed else news.high_watermark
    return bool(news.error_code) or position.fetch_offset != readable_end


class FetchSessionCache:
    """The broker's fetch sessions, a state machine over a clock: ``context`` when a fetch
    arrives, ``changed`` when its wait was woken, ``answer`` with what its reads found when it
    is about to be answered. Each session's Watch is registered on ``signals`` while it lives."""

    def __init__(self, clock: Clock, max_slots: int = 1000, eviction_ms: int = 120_000, max_size: int = 10_000,
                 new_id: Callable[[], int] = lambda: secrets.randbelow(MAX_EPOCH) + 1,
                 signals: GrowthSignals | None = None) -> None:
        self.clock, self.max_slots, self.eviction_ms, self._new_id = clock, max_slots, eviction_ms, new_id
        self.signals = signals if signals is not None else GrowthSignals()
        # Partitions per session: the broker's own partition limit, so a real consumer always fits and
        # a client naming made-up partitions epoch after epoch cannot grow a session without end.
        self.max_size = max_size
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()   # least recently used first
        self.stats = FetchSessionStats()

    def __len__(self) -> int:
        return len(self._sessions)

    @property
    def partitions_cached(self) -> int:
        return sum(len(s.partitions) for s in self._sessions.values())

    def context(self, session_id: int, epoch: int, wanted: Iterable[tuple[Partition, FetchPosition]],
                forgotten: Iterable[Partition] = ()) -> FetchContext:
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            self.stats.fetches["full"] += 1
            if session_id in self._sessions:   # a full fetch closes the session it names
                self._drop(self._sessions[session_id])
            return FetchContext(list(wanted), wants_session=epoch == INITIAL_EPOCH)
        session = self._sessions.get(session_id)
        error = (ErrorCode.FETCH_SESSION_ID_NOT_FOUND if session is None else
                 ErrorCode.INVALID_FETCH_SESSION_EPOCH if epoch != session.epoch else ErrorCode.NONE)
        if error:
            self.stats.errors[error.name] += 1
            return FetchContext([], error=error)
        self.stats.fetches["incremental"] += 1
        partitions, named, added = session.partitions, set(), []
        for partition, position in wanted:
            cached = partitions.get(partition)
            if cached is None:
                cached = partitions[partition] = CachedPartition(position)
                session.reorder(cached)
                added.append(partition)
            else:
                cached.position = position
            named.add(partition)
        self.signals.register(session.watch, added)
        gone = [p for p in forgotten if partitions.pop(p, None) is not None]
        self.signals.unregister(session.watch, gone)
        session.unquiet.difference_update(gone)
        if len(partitions) > self.max_size:
            self._drop(session)   # the client starts over, and its full fetch gets no session
            self.stats.errors[ErrorCode.FETCH_SESSION_ID_NOT_FOUND.name] += 1
            return FetchContext([], error=ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if not partitions:
            self._drop(session)
            return FetchContext([])
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self.clock.now_ms()
        self._sessions.move_to_end(session.id)
        context = FetchContext([], session=session, session_id=session.id)
        self._read_also(context, named | session.unquiet | session.watch.take_changed())
        return context

    def changed(self, context: FetchContext) -> None:
        """A watched partition changed while the fetch waited: read it too."""
        if context.session is not None:
            self._read_also(context, context.session.watch.take_changed())

    @staticmethod
    def _read_also(context: FetchContext, more: set[Partition]) -> None:
        partitions = context.session.partitions
        more.update(p for p, _ in context.targets)
        ordered = sorted((partitions[p].order, p) for p in more if p in partitions)
        context.targets = [(p, partitions[p].position) for _, p in ordered]

    def answer(self, context: FetchContext, news: dict[Partition, PartitionNews],
               read_committed: bool = False) -> list[Partition]:
        """The partitions the response carries, in order; opens the session a full fetch asked for."""
        if context.session is None:
            if context.wants_session and news:
                context.session_id = self._open(context.targets, news, read_committed)
            return [p for p, _ in context.targets]
        answered = []
        session = context.session
        for partition, _ in context.targets:
            found, cached = news[partition], session.partitions.get(partition)
            if cached is None:   # forgotten by a later fetch of the session while this one waited
                continue
            if found.records or found.error_code or _offsets(found) != cached.told:
                cached.told = _told(found)
                session.reorder(cached)
                answered.append(partition)
            if _unquiet(cached.position, found, read_committed):
                session.unquiet.add(partition)
            else:
                session.unquiet.discard(partition)
        self.stats.partitions_answered_incrementally += len(answered)
        return answered

    def _open(self, targets: list[tuple[Partition, FetchPosition]], news: dict[Partition, PartitionNews],
              read_committed: bool) -> int:
        now = self.clock.now_ms()
        if len(targets) > self.max_size:
            return NO_SESSION
        if len(self._sessions) >= self.max_slots and not (self._sessions and self._evict_for(len(targets), now)):
            return NO_SESSION   # the cache is full (or off): this client fetches without a session
        session_id = self._new_id()
        while session_id in self._sessions:
            session_id = self._new_id()
        session = FetchSession(session_id, 1, {p: CachedPartition(pos, _told(news[p]), i)
                                               for i, (p, pos) in enumerate(targets)}, now, answers=len(targets))
        session.unquiet.update(p for p, pos in targets if _unquiet(pos, news[p], read_committed))
        self.signals.register(session.watch, session.partitions)
        self._sessions[session_id] = session
        return session_id

    def _drop(self, session: FetchSession) -> None:
        del self._sessions[session.id]
        self.signals.unregister(session.watch, session.partitions)

    def _evict_for(self, size: int, now: int) -> bool:
        oldest = next(iter(self._sessions.values()))
        if now - oldest.last_used_ms < self.eviction_ms:
            smallest = min(self._sessions.values(), key=lambda s: (len(s.partitions), s.last_used_ms))
            if len(smallest.partitions) >= size:
                return False
            oldest = smallest
        self._drop(oldest)
        self.stats.evictions += 1
        return True
