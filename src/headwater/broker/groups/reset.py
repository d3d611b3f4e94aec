"""Where a consumer group's offset goes when an operator resets it (Kafka's reset-offsets
modes), the one rule shared by `headwater groups reset-offsets` and the web console."""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("earliest", "latest", "offset", "datetime", "shift")


@dataclass(frozen=True)
class ResetTo:
    mode: str        # one of MODES
    value: int = 0   # the offset (offset), records to move by (shift), or a Unix time in ms (datetime)

    def target(self, earliest: int, latest: int, committed: int | None, at_time: int) -> int:
        """The new offset of one partition whose log spans [earliest, latest]. ``at_time`` is the
        first offset at or after the datetime (-1: none that late); a partition the group never
        committed shifts from its earliest offset. Offsets outside the log are clamped to it."""
        if self.mode == "earliest":
            return earliest
        if self.mode == "latest":
            return latest
        if self.mode == "datetime":
            return latest if at_time < 0 else at_time   # nothing that late: the end
        start = self.value if self.mode == "offset" else (earliest if committed is None else committed) + self.value
        return min(max(start, earliest), latest)
