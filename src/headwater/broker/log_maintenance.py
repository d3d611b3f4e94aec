"""Background log maintenance: retention and the log cleaner, off the event loop.

Two periodic tasks, as in Kafka: retention every ``log.retention.check.interval.ms`` and a
cleaner pass every ``log.cleaner.backoff.ms``. Each pass runs on a worker thread, so a long
compaction never stalls produce or fetch; the logs' locks keep the two passes and the
appends from stepping on each other (see headwater.log.partition). The compaction itself
runs in the cleaner's worker process (headwater.log.cleaner_worker), on another core, at
most ``log.cleaner.io.max.bytes.per.second``.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from headwater.broker.stats import BrokerStats
from headwater.log import LogManager
from headwater.log.cleaner_worker import CleanerWorker

logger = logging.getLogger("headwater.broker")


class LogMaintenance:
    def __init__(self, logs: LogManager, retention_check_interval_ms: int, cleaner_interval_ms: int,
                 cleaner_io_max_bytes_per_second: float | None, moved: Callable[[str, int], None],
                 stats: BrokerStats):
        self.logs = logs
        self._moved = moved   # told on the event loop of each partition whose log start retention moved
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cleaner_worker = CleanerWorker(cleaner_io_max_bytes_per_second)
        logs.cleaner.run = self.cleaner_worker.run
        self.stats = stats
        self._schedule = ((retention_check_interval_ms, self._retention), (cleaner_interval_ms, self._clean))
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._tasks = [asyncio.create_task(self._every(interval, work)) for interval, work in self._schedule]

    async def stop(self) -> None:
        """Stop scheduling passes and the cleaner's worker. A pass already on its thread finishes
        the log it holds (a compaction in the worker is dropped); closing the logs waits for it,
        and it skips every log closed after that."""
        self.cleaner_worker.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @staticmethod
    async def _every(interval_ms: int, work) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await asyncio.to_thread(work, int(time.time() * 1000))
            except Exception:  # a failed pass is logged and retried at the next interval
                logger.exception("log maintenance pass failed")

    def _retention(self, now_ms: int) -> None:
        # A fetch session reads a partition only once told it changed: the new log start is news.
        deleted = self.logs.enforce_retention(now_ms, lambda *p: self._loop.call_soon_threadsafe(self._moved, *p))
        self.stats.retention_deleted(deleted)
        if deleted:
            logger.info("retention deleted %d segment(s)", deleted)

    def _clean(self, now_ms: int) -> None:
        start = time.monotonic()
        stats = self.logs.clean(now_ms)
        self.stats.cleaned(stats)
        if stats.logs_cleaned:
            logger.info("log cleaner: %d log(s), %d segment(s) rewritten, %d record(s) removed, %d -> %d bytes, "
                     "%d uncleanable log(s) in %.2f s", stats.logs_cleaned, stats.segments_rewritten,
                     stats.records_removed, stats.bytes_read, stats.bytes_written, stats.uncleanable_logs,
                     time.monotonic() - start)
