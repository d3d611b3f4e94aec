"""The log cleaner's I/O throttle: Kafka's ``log.cleaner.io.max.bytes.per.second``.

The cleaner reports every byte it reads and writes. Whenever the bytes of the current period
are ahead of the rate, the throttle sleeps until they are not; a period lasts at least the
check interval, so a little idle time is credited, not a long idle spell (as Kafka's
``Throttler``, which checks only once per interval: this one never lets a burst run ahead by
more than one report). Clock and sleep are arguments, so tests drive it by hand.
"""
from __future__ import annotations

import time
from collections.abc import Callable

CHECK_INTERVAL_S = 0.3  # as Kafka's throttler


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
        """Account ``count`` bytes of I/O; sleep while the period ran ahead of the rate."""
        self._observed += count
        owed = self._observed / self.bytes_per_second - (self._clock() - self._period_start)
        if owed > 0:
            self._sleep(owed)
        if self._clock() - self._period_start >= self._interval:
            self._period_start, self._observed = self._clock(), 0


class Unthrottled:
    """No limit (Kafka's default rate is Double.MaxValue)."""

    def observe(self, count: int) -> None:
        pass


def throttle_for(bytes_per_second: float | None) -> Throttle | Unthrottled:
    return Unthrottled() if bytes_per_second is None else Throttle(bytes_per_second)
