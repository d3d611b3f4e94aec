"""The recent past for the console's plots: a sample of every topic's log end and every
group's lag, taken every few seconds and kept for the last minutes (a ring buffer)."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from headwater.broker.broker import Broker
from headwater.http.state import consumer_groups, group_offsets
from headwater.schemas.store import SCHEMAS_TOPIC

SAMPLE_INTERVAL_S = 2.0
KEPT_SAMPLES = 300   # ten minutes at the default interval
RATE_WINDOW_S = 20.0  # message rates are averaged over this long, so one burst does not dwarf the rest


@dataclass(frozen=True)
class Sample:
    at: float                                     # Unix time, seconds
    log_ends: dict[str, int]                      # topic -> sum of its partitions' log end offsets
    lags: dict[str, dict[tuple[str, int], int]]   # group -> (topic, partition) -> lag


class History:
    def __init__(self, broker: Broker, interval_s: float = SAMPLE_INTERVAL_S, kept: int = KEPT_SAMPLES,
                 clock: Callable[[], float] = time.time):
        self.broker, self.interval_s, self.clock = broker, interval_s, clock
        self.samples: deque[Sample] = deque(maxlen=kept)
        self._task: asyncio.Task | None = None

    def sample(self) -> None:
        broker = self.broker
        ends = {t.name: sum(p.log_end_offset for p in t.partitions) for t in broker.log_manager.topics.values()}
        lags = {g.group_id: {(r.topic, r.partition): r.lag for r in group_offsets(broker, g.group_id)}
                for g in consumer_groups(broker)}
        self.samples.append(Sample(self.clock(), ends, lags))

    def message_rates(self, window_s: float = RATE_WINDOW_S) -> tuple[list[float], dict[str, list[float | None]]]:
        """(times, topic -> records/s over the ``window_s`` before each sample), internal topics left out.

        The rate at a sample is what the topic's log end grew by since the latest sample at least
        ``window_s`` older, over ``window_s``; until the history is that long, since the first sample
        it has, still over ``window_s`` (what came before it is unknown, so it counts as none). A
        burst is thus spread over a window instead of showing as one sample's spike."""
        samples = list(self.samples)
        times = [s.at for s in samples[1:]]
        rates: dict[str, list[float | None]] = {}
        first = 0   # index of the sample a window starts at
        for i, after in enumerate(samples[1:], start=1):
            while first + 1 < i and samples[first + 1].at <= after.at - window_s:
                first += 1
            before = samples[first]
            for topic, end in after.log_ends.items():
                if topic.startswith("__") or topic == SCHEMAS_TOPIC:   # the broker's and the registry's own
                    continue
                grown = end - before.log_ends.get(topic, 0)   # a topic newer than the window's start began empty
                rates.setdefault(topic, [None] * len(times))[i - 1] = max(grown, 0) / max(window_s, after.at - before.at)
        return times, rates

    def group_lag(self, group_id: str) -> tuple[list[float], dict[str, list[int | None]]]:
        """(times, "topic-partition" -> lag at each sample) of one group."""
        samples = list(self.samples)
        series: dict[str, list[int | None]] = {}
        for i, sample in enumerate(samples):
            for (topic, partition), lag in sample.lags.get(group_id, {}).items():
                series.setdefault(f"{topic}-{partition}", [None] * len(samples))[i] = lag
        return [s.at for s in samples], series

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.interval_s)
