"""Partition growth signals: a long-polling fetch sleeps on these instead of polling the log."""
from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

Partition = tuple[str, int]


class Watch:
    """A long-lived watcher of many partitions (a fetch session, or one full fetch): which of them
    changed since it last looked, and the future of the fetch waiting on them, if one waits.

    Registered once per partition, not once per fetch, so an idle consumer's fetch on thousands
    of partitions costs the broker one future, whatever the number of partitions."""
    __slots__ = ("changed", "waiter")

    def __init__(self) -> None:
        self.changed: set[Partition] = set()
        self.waiter: asyncio.Future | None = None

    def take_changed(self) -> set[Partition]:
        changed, self.changed = self.changed, set()
        return changed

    def arm(self) -> None:
        """A fresh waiter, made before reading the logs: a change during the read still wakes it."""
        self.waiter = asyncio.get_running_loop().create_future()

    async def wait(self, timeout: float) -> bool:
        """Until a watched partition changes (True) or ``timeout`` seconds pass (False)."""
        try:
            await asyncio.wait_for(self.waiter, timeout)
            return True
        except TimeoutError:
            return False

    def wake(self, partition: Partition) -> None:
        self.changed.add(partition)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


class GrowthSignals:
    """Who is told when a partition grows: one shared future per partition some short wait
    watches (``watch``: share fetches, the console), and the Watches registered on it (fetches
    and fetch sessions).

    A partition has a future only while some fetch watches it, and Watches only while their
    fetch or session lives, so what this holds is bounded by the fetches and sessions there
    are now, never by the names clients have ever asked about.
    """

    def __init__(self) -> None:
        self._futures: dict[Partition, asyncio.Future] = {}
        self._watchers: dict[Partition, int] = {}   # how many fetches watch each partition
        self._watches: dict[Partition, set[Watch]] = {}   # the Watches registered on each partition

    def __len__(self) -> int:
        """Entries held: a future or a set of Watches per partition (none once nothing watches)."""
        return len(self._futures) + len(self._watches)

    @contextmanager
    def watch(self, partitions: list[Partition]) -> Iterator[list[asyncio.Future]]:
        """The futures of ``partitions``, valid inside the block (take them before reading the
        log, so an append between the read and the wait still wakes the watcher)."""
        # One loop each way, no call per partition: an idle consumer's fetch watches thousands.
        watchers, futures, loop = self._watchers, self._futures, asyncio.get_running_loop()
        mine = []
        for p in partitions:
            watchers[p] = watchers.get(p, 0) + 1
            fut = futures.get(p)
            if fut is None or fut.done():
                fut = futures[p] = loop.create_future()
            mine.append(fut)
        try:
            yield mine
        finally:
            for p in partitions:
                left = watchers[p] - 1
                if left > 0:
                    watchers[p] = left
                else:
                    del watchers[p]
                    futures.pop(p, None)

    def register(self, watch: Watch, partitions: Iterable[Partition]) -> None:
        watches = self._watches
        for p in partitions:
            watchers = watches.get(p)
            if watchers is None:
                watches[p] = {watch}
            else:
                watchers.add(watch)

    def unregister(self, watch: Watch, partitions: Iterable[Partition]) -> None:
        watches = self._watches
        for p in partitions:
            watchers = watches.get(p)
            if watchers is not None:
                watchers.discard(watch)
                if not watchers:
                    del watches[p]

    def notify(self, topic: str, partition: int) -> None:
        """``partition`` grew, or its offsets (log start, last stable) or existence changed."""
        key = (topic, partition)
        fut = self._futures.pop(key, None)
        if fut is not None and not fut.done():
            fut.set_result(None)
        for watch in self._watches.get(key, ()):
            watch.wake(key)

    def forget_topic(self, topic: str) -> None:
        for key in {k for k in [*self._futures, *self._watches] if k[0] == topic}:
            self.notify(*key)

