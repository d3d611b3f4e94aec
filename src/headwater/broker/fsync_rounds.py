"""Group commit: one fsync round covers every append that asked for durability while the
previous round ran.

A produce that must be durable before it is answered (acks=all with ``--flush always``, or
a topic's flush.messages / flush.ms due) appends to the page cache at once, then awaits
``durable(logs)``. One GroupCommit per broker, that is per data directory, runs its rounds
one at a time (a thread per partition would mean thousands of threads at thousands of
partitions). A round fsyncs each log touched since the previous round started, once, however
many requests touched it, the logs at the same time on a few fsync threads: on ext4 three
fsyncs of different files took 7.2 ms one after another and 1.1 ms at once, as the file
system's journal commits them together. The event loop serves other clients meanwhile. A request is
answered only after a round that started after its append has completed, so nothing is
acknowledged before its fsync; the logs whose fsync failed are reported to the waiting
requests (KAFKA_STORAGE_ERROR).
"""
from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Errors = dict[Hashable, OSError]
T = TypeVar("T")
FSYNC_THREADS = 8   # logs fsynced at once within a round


class GroupCommit:
    def __init__(self, sync: Callable[[Hashable], None]):
        self._sync = sync  # fsync one log (Log.flush); called on the fsync threads
        self._fsyncs = ThreadPoolExecutor(max_workers=FSYNC_THREADS, thread_name_prefix="fsync")
        self._waiting: dict[Hashable, None] = {}      # logs touched since the running round started
        self._next: asyncio.Future[Errors] | None = None  # the round that will cover them
        self._running = False
        self.rounds = 0  # fsync rounds completed (for tests and the bench)

    async def durable(self, logs: Iterable[Hashable]) -> Errors:
        """Wait until an fsync that started after this call covered each of ``logs`` (already
        appended); returns the logs whose fsync failed, with the error."""
        return await self.join(logs)

    def join(self, logs: Iterable[Hashable]) -> Awaitable[Errors]:
        """``durable``, joining the round at the call (starting it if none runs), not at the first
        await: the caller can go on working while the fsync runs, and await the result later."""
        logs = list(logs)
        if not logs:
            return settled({})
        loop = asyncio.get_running_loop()
        self._waiting.update(dict.fromkeys(logs))
        if self._next is None:
            self._next = loop.create_future()
        covering = self._next
        if not self._running:
            self._start_round(loop)
        return _errors_of(covering, logs)

    def _start_round(self, loop: asyncio.AbstractEventLoop) -> None:
        logs, self._waiting = list(self._waiting), {}
        done, self._next = self._next, None
        self._running = True
        outcomes: list[Exception | None] = [None] * len(logs)
        left, lock = [len(logs)], threading.Lock()

        def sync(i: int, plog: Hashable) -> None:
            outcomes[i] = self._sync_one(plog)
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:  # one wake-up of the event loop per round, not one per log
                loop.call_soon_threadsafe(self._round_finished, loop, done, logs, outcomes)

        for i, plog in enumerate(logs):
            self._fsyncs.submit(sync, i, plog)

    def _sync_one(self, plog: Hashable) -> Exception | None:
        try:
            self._sync(plog)
        except Exception as exc:  # an OSError is the log's; anything else fails the round
            return exc
        return None

    def _round_finished(self, loop: asyncio.AbstractEventLoop, done: asyncio.Future[Errors], logs: list[Hashable],
                        outcomes: list[Exception | None]) -> None:
        self._running = False
        self.rounds += 1
        bug = next((exc for exc in outcomes if exc is not None and not isinstance(exc, OSError)), None)
        if bug is not None:
            done.set_exception(bug)
        else:
            done.set_result({plog: error for plog, error in zip(logs, outcomes) if error is not None})
        if self._waiting:
            self._start_round(loop)

    def close(self) -> None:
        self._fsyncs.shutdown()


async def settled(value: T) -> T:
    """An awaitable of a result known at once."""
    return value


async def _errors_of(covering: asyncio.Future[Errors], logs: list[Hashable]) -> Errors:
    errors = await asyncio.shield(covering)  # a cancelled waiter must not cancel the round
    return {plog: errors[plog] for plog in logs if plog in errors}
