"""A clock that moves only when a test says so, for stepping the broker's state machines in-process."""
from __future__ import annotations

import asyncio
import heapq
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(order=True)
class ManualTimer:
    due_ms: int
    seq: int                                   # equal deadlines fire in the order they were set
    callback: Callable[..., None] = field(compare=False)
    args: tuple[Any, ...] = field(compare=False)
    cancelled: bool = field(default=False, compare=False)

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """headwater.broker.clock.Clock with time that stands still until ``advance``, which fires
    every timer that falls due, in deadline order, each at its own deadline."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self._now_ms = now_ms
        self._timers: list[ManualTimer] = []
        self._seq = itertools.count()
        self._loop = asyncio.new_event_loop()  # never run: futures need a loop to belong to, not a running one

    def now_ms(self) -> int:
        return self._now_ms

    def after(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> ManualTimer:
        timer = ManualTimer(self._now_ms + delay_ms, next(self._seq), callback, args)
        heapq.heappush(self._timers, timer)
        return timer

    def create_future(self) -> asyncio.Future:
        return self._loop.create_future()

    def advance(self, ms: int) -> None:
        until = self._now_ms + ms
        while self._timers and self._timers[0].due_ms <= until:
            timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                self._now_ms = timer.due_ms
                timer.callback(*timer.args)
        self._now_ms = until

    def close(self) -> None:
        self._loop.close()
