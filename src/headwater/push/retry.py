"""How long to wait before the next attempt: exponential backoff with jitter."""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    base: float = 0.5      # seconds before the second attempt (before jitter)
    ceiling: float = 30.0  # no wait grows past this

    def delay(self, failed_attempts: int, rng: random.Random = random) -> float:
        """Wait after `failed_attempts` failures: base * 2^(n-1), capped, then "equal jitter"
        (a random point in its upper half), so retries of many records spread out while each
        still waits at least half its step."""
        step = min(self.ceiling, self.base * 2 ** (failed_attempts - 1))
        return rng.uniform(step / 2, step)
