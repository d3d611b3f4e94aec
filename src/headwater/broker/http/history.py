"""The recent past for the console's plots: a sample of every topic's log end and every
group's lag, taken every few seconds and kept for the last minutes (a ring buffer)."""
from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass

from headwater.broker.broker import Broker
from headwater.broker.http.state import group_offsets

SAMPLE_INTERVAL_S = 2.0
KEPT_SAMPLES = 300   # ten minutes at the default interval


@dataclass(frozen=True)
class Sample:
    at: float                                     # Unix time, seconds
    log_ends: dict[str, int]                      # topic -> sum of its partitions' log end offsets
    lags: dict[str, dict[tuple[str, int], int]]   # group -> (topic, partition) -> lag


class History:
    def __init__(self, broker: Broker, interval_s: float = SAMPLE_INTERVAL_S, kept: int = KEPT_SAMPLES):
        self.broker, self.interval_s = broker, interval_s
        self.samples: deque[Sample] = deque(maxlen=kept)
        self._task: asyncio.Task | None = None

    def sample(self) -> None:
        broker = self.broker
        ends = {t.name: sum(p.log_end_offset for p in t.partitions) for t in broker.log_manager.topics.values()}
        lags = {g.group_id: {(r.topic, r.partition): r.lag for r in group_offsets(broker, g.group_id)}
                for g in broker.groups.list_groups()}
        self.samples.append(Sample(time.time(), ends, lags))

    def message_rates(self) -> tuple[list[float], dict[str, list[float | None]]]:
        """(times, topic -> records/s between each sample and the one before)."""
        samples = list(self.samples)
        times = [s.at for s in samples[1:]]
        rates: dict[str, list[float | None]] = {}
        for i, (before, after) in enumerate(zip(samples, samples[1:])):
            for topic, end in after.log_ends.items():
                series = rates.setdefault(topic, [None] * len(times))
                if topic in before.log_ends:
                    series[i] = max(end - before.log_ends[topic], 0) / (after.at - before.at)
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
