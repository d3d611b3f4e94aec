"""Partition growth signals: a long-polling fetch sleeps on these instead of polling the log."""
from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

Partition = tuple[str, int]


class GrowthSignals:
    """One shared future per watched partition, completed (and replaced) when the partition grows.

    A partition has a future only while some fetch watches it: the last watcher to leave
    drops it, so what this holds is bounded by the fetches waiting now, never by the names
    clients have ever asked about.
    """

    def __init__(self) -> None:
        self._futures: dict[Partition, asyncio.Future] = {}
        self._watchers: dict[Partition, int] = {}   # how many fetches watch each partition

    def __len__(self) -> int:
        return len(self._futures)

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

    def notify(self, topic: str, partition: int) -> None:
        fut = self._futures.pop((topic, partition), None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._futures if k[0] == topic]:
            self.notify(*key)


async def any_grows(signals: list[asyncio.Future], timeout: float) -> bool:
    """Wait until one of ``signals`` completes (True) or ``timeout`` seconds pass (False).

    asyncio.wait would do, at three to four times the cost: it copies the futures into a set
    and checks each for a coroutine first, and an idle consumer's fetch waits on thousands."""
    waiter = asyncio.get_running_loop().create_future()

    def wake(_: asyncio.Future) -> None:
        if not waiter.done():
            waiter.set_result(None)

    for signal in signals:
        signal.add_done_callback(wake)
    try:
        await asyncio.wait_for(waiter, timeout)
        return True
    except TimeoutError:
        return False
    finally:
        for signal in signals:
            signal.remove_done_callback(wake)
