"""The log cleaner's I/O throttle: Kafka's ``log.cleaner.io.max.bytes.per.second``.

The cleaner reports every byte it reads and writes; once a check interval has passed, the
throttle compares the bytes of that interval with the rate and sleeps off the excess, as
Kafka's ``Throttler`` does. Clock and sleep are arguments, so tests drive it by hand.
"""
from __future__ import annotations

import time
from collections.abc import Callable

CHECK_INTERVAL_S = 0.3  # Kafka's throttler checks every 300 ms


class Throttle:
    def __init__(self, bytes_per_second: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, check_interval_s: float = CHECK_INTERVAL_S):
        if bytes_per_second <= 0:
            raise ValueError(f"a throttle rate must be positive, not {bytes_per_second}")
        self.bytes_per_second = bytes_per_second
        self._clock, self._sleep, self._interval = clock, sleep, check_interval_s
        self._period_start = clock()
        self._observed = 0

    def observe(self, count: int) -> None:
        """Account ``count`` bytes of I/O; sleep when the period ran faster than the rate."""
        self._observed += count
        elapsed = self._clock() - self._period_start
        if elapsed < self._interval:
            return
        owed = self._observed / self.bytes_per_second - elapsed  # seconds the bytes should have taken, less those they did
        if owed > 0:
            self._sleep(owed)
        self._period_start, self._observed = self._clock(), 0


class Unthrottled:
    """No limit (Kafka's default rate is Double.MaxValue)."""

    def observe(self, count: int) -> None:
        pass


def throttle_for(bytes_per_second: float | None) -> Throttle | Unthrottled:
    return Unthrottled() if bytes_per_second is None else Throttle(bytes_per_second)
