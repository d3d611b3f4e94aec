"""What every CDC connector offers, whatever its source database: start, run, status, stop.

The `headwater cdc` command, the demo and the contract tests drive the PostgreSQL and the
SQLite connector through this one interface; a connector supplies how it ships changes
(`_ship`) and what it closes (`_close`).
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from typing import Callable

from headwater.waiting import never

StatusCallback = Callable[[str], None]


class StatusTicker:
    """Hands the connector's status line to `on_status` at most every `interval` seconds."""

    def __init__(self, line: Callable[[], str]):
        self._line = line
        self._on_status: StatusCallback | None = None
        self._interval = 0.0
        self._last = time.monotonic()

    def show_to(self, on_status: StatusCallback | None, interval: float) -> None:
        self._on_status, self._interval, self._last = on_status, interval, time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        if self._on_status is not None and now - self._last >= self._interval:
            self._on_status(self._line())
            self._last = now


class Connector(ABC):
    """Capture the changes of a source database into Debezium-shaped topic records."""

    def __init__(self) -> None:
        self._started = False
        self._stopping = threading.Event()
        self._should_stop: Callable[[], bool] = never  # run's own stop condition, for start to wait by too
        self.ticker = StatusTicker(self.status)

    @abstractmethod
    def start(self) -> None:
        """Prepare the source for capture (publication and slot, or triggers), load the
        stored position, and ship the snapshot if one is due. `run` calls it if you did not.
        While the broker is down it waits, until it is asked to stop (`Stopped`)."""

    def run(self, should_stop: Callable[[], bool] = lambda: False, status_interval: float = 2.0,
            on_status: StatusCallback | None = None) -> None:
        """Ship changes until `stop()` or `should_stop()`, then wait for the broker to
        acknowledge what was sent; `on_status(status())` every `status_interval` seconds.
        Asked to stop before it could start (the broker was down), or while the broker keeps
        the producer's queue full, or in the middle of a snapshot: `Stopped`; what was not
        acknowledged keeps its place at the source (a snapshot is taken again)."""
        self.ticker.show_to(on_status, status_interval)
        self._should_stop = should_stop
        try:
            if not self._started:
                self.start()
            self._ship(self.stop_requested)
        finally:
            self._close()

    @abstractmethod
    def status(self) -> str:
        """One line: what was shipped, the source position, what the broker acknowledged, the lag."""

    def stop(self) -> None:
        """Make `run` return (safe from another thread or a signal handler)."""
        self._stopping.set()

    def stop_requested(self) -> bool:
        return self._stopping.is_set() or self._should_stop()

    @abstractmethod
    def _ship(self, stopping: Callable[[], bool]) -> None:
        """Ship changes until `stopping()`, then flush."""

    @abstractmethod
    def _close(self) -> None:
        """Close whatever `start` opened (also after a failure half-way)."""
