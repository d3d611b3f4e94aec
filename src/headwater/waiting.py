"""Long-running clients and a broker that is down: wait for it with backoff on the client
already made, stop when asked, and keep librdkafka's own log down to each distinct line once.

The CDC connectors, the outbox relay, push subscriptions and the pipelines all wait here;
the `headwater` command's stop flag (SIGINT/SIGTERM) is what they are asked to stop by.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Callable, TypeVar

from confluent_kafka import KafkaException

T = TypeVar("T")

FIRST_DELAY = 0.5   # seconds before the second attempt, doubling up to LONGEST_DELAY
LONGEST_DELAY = 10.0
STOP_CHECK = 0.1    # seconds between looks at the stop flag while backing off
PROBE_TIMEOUT = 1.0  # seconds one look for a broker that is down takes: a stop request waits no longer


class Stopped(Exception):
    """Asked to stop while waiting for the broker: nothing was done that needs saving."""


def never() -> bool:
    return False


def wait_for_broker(attempt: Callable[[], T], bootstrap: str, should_stop: Callable[[], bool] = never,
                    on_wait: Callable[[str], None] = lambda line: None) -> T:
    """`attempt()` until it returns, retrying with backoff while it fails because the broker
    is not there (a KafkaException, or a client call that timed out). `on_wait` hears one
    line per distinct reason, not one per attempt. `should_stop()` ends the wait: `Stopped`."""
    delay, told = FIRST_DELAY, set()
    while True:
        if should_stop():
            raise Stopped()
        try:
            result = attempt()
            if told:
                on_wait(f"the broker at {bootstrap} answers")
                client_log_filter.forget()  # a later outage is worth hearing about again
            return result
        except (KafkaException, TimeoutError) as exc:
            reason = exc.args[0].str() if isinstance(exc, KafkaException) and exc.args else str(exc) or "timed out"
            if reason not in told:
                told.add(reason)
                on_wait(f"waiting for the broker at {bootstrap}: {reason} (retrying; Ctrl-C stops)")
        deadline = time.monotonic() + delay
        while time.monotonic() < deadline and not should_stop():
            time.sleep(STOP_CHECK)
        delay = min(delay * 2, LONGEST_DELAY)


_THREAD = re.compile(r"^\[thrd:[^\]]*\]: ")  # which librdkafka thread logged: the address follows anyway
_COUNTS = re.compile(r"(?<![\w.:#/])\d+")  # "after 3ms", "5 identical": not the digits of an address


class DistinctOnce(logging.Filter):
    """Passes each distinct librdkafka line once: counts and durations do not make a line
    distinct (addresses do), so a retried connection is told of once per broker."""

    LIMIT = 512  # distinct lines remembered; past that the memory starts again

    def __init__(self) -> None:
        super().__init__()
        self._seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        # confluent-kafka logs ("%s [%s] %s", facility, client instance name, text)
        if isinstance(record.args, tuple) and len(record.args) == 3:
            facility, _instance, text = record.args
            record.msg, record.args = f"{facility}: {_THREAD.sub('', str(text))}", ()
        key = _COUNTS.sub("#", record.getMessage())
        if key in self._seen:
            return False
        if len(self._seen) >= self.LIMIT:
            self._seen.clear()
        self._seen.add(key)
        return True

    def forget(self) -> None:
        self._seen.clear()


# Every confluent-kafka client of a long-running part gets {"logger": client_log}: its lines
# go through Python logging, warnings and errors only, each distinct one once.
client_log = logging.getLogger("headwater.kafka")
client_log.setLevel(logging.WARNING)
client_log_filter = DistinctOnce()
client_log.addFilter(client_log_filter)
