"""What every long-running command (cdc, events relay, push, pipelines run) shares: how it
stops and how it tells of a broker that is down.

The first SIGINT (Ctrl-C) or SIGTERM asks the command to stop: it finishes its step, saves
its progress and exits 130 or 143 (what a shell reports for a process the signal ended).
A second signal interrupts at once. librdkafka's lines come through the command's own
prefix, each distinct one once (`headwater.waiting.client_log`). Their parsers set
`waits_for_broker=True`: `main` then leaves out the one-shot commands' reachability check.
"""
from __future__ import annotations

import logging
import signal
import sys
from typing import Callable

from headwater.waiting import client_log

EXIT_STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}


class Terminated(BaseException):
    """SIGTERM for a command that has no stop request of its own: unwinds like Ctrl-C does."""


def terminate(_signum, _frame) -> None:
    raise Terminated()


class StopRequest:
    """The stop flag: call it to ask whether a stop was requested."""

    def __init__(self) -> None:
        self.signal: int | None = None
        for sig in EXIT_STATUS:
            signal.signal(sig, self._received)

    def _received(self, signum: int, _frame) -> None:
        if self.signal is not None:  # asked twice: stop now
            raise KeyboardInterrupt() if signum == signal.SIGINT else Terminated()
        self.signal = signum

    def __call__(self) -> bool:
        return self.signal is not None

    def exit_status(self) -> int:
        """0 if the command ended by itself, else the first signal's status."""
        return EXIT_STATUS.get(self.signal, 0)


def command_log(command: str) -> Callable[[str], None]:
    """A printer of `headwater COMMAND: line` to stderr; the Kafka clients' lines go there too."""
    def say(line: str) -> None:
        print(f"headwater {command}: {line}", file=sys.stderr, flush=True)

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"headwater {command}: kafka %(message)s"))
    client_log.handlers[:] = [handler]
    client_log.propagate = False
    return say
