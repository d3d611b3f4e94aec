"""Time as the broker's state machines see it: the wall clock, timers, and futures for parked requests.

A state machine (the group coordinator today) takes a ``Clock`` instead of calling asyncio
and ``time`` itself, so a test can drive it step by step with a clock it moves by hand.
Futures come from the clock too: a parked request is answered on the loop its timers run on.
"""
from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Protocol


class Timer(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock time in milliseconds since the epoch (commit timestamps)."""

    def after(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> Timer:
        """Call ``callback(*args)`` once ``delay_ms`` have passed, unless the timer is cancelled first."""

    def create_future(self) -> asyncio.Future: ...


class LoopClock:
    """The system clock and the running asyncio event loop: what the broker runs on."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def after(self, delay_ms: int, callback: Callable[..., None], *args: Any) -> Timer:
        return asyncio.get_running_loop().call_later(delay_ms / 1000, callback, *args)

    def create_future(self) -> asyncio.Future:
        return asyncio.get_running_loop().create_future()
