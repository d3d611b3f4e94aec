"""Partition growth signals: a long-polling fetch sleeps on these instead of polling the log."""
from __future__ import annotations

import asyncio


class GrowthSignals:
    """One shared future per partition, completed (and replaced) when the partition grows.

    Sharing one future per partition means a waiting fetch registers nothing of its own,
    so fetches that time out on idle partitions leave nothing behind.
    """

    def __init__(self) -> None:
        self._futures: dict[tuple[str, int], asyncio.Future] = {}

    def future(self, topic: str, partition: int) -> asyncio.Future:
        fut = self._futures.get((topic, partition))
        if fut is None or fut.done():
            fut = self._futures[(topic, partition)] = asyncio.get_running_loop().create_future()
        return fut

    def notify(self, topic: str, partition: int) -> None:
        fut = self._futures.pop((topic, partition), None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def forget_topic(self, topic: str) -> None:
        for key in [k for k in self._futures if k[0] == topic]:
            self.notify(*key)
