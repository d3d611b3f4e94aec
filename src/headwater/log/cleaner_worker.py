"""The log cleaner's worker process: compaction off the broker's interpreter, on another core.

The broker keeps one worker, a ``python -m headwater.log.cleaner_worker`` subprocess started
at the first cleaning pass and again after it dies. A pass sends it a ``CleanJob`` over its
stdin (pickled, ``multiprocessing.connection`` framing); it writes the ``.cleaned`` files and sends
back the ``CleanResult`` or the exception it raised over its stdout; the broker swaps the files in. The
worker reads only closed segments, which the log's maintenance lock keeps in place while it
works, and writes only ``.cleaned`` files, which nobody else touches until it answers. If it
dies mid-job the broker deletes them and a later pass starts over. It dies with the broker
(PR_SET_PDEATHSIG), so an orphan never writes into the data directory of the next one. Its
throttle (``log.cleaner.io.max.bytes.per.second``) lives as long as it does. It runs at a
lower CPU priority than the broker (nice 10), so produce and fetch elsewhere keep their pace.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys
import threading
from multiprocessing.connection import Connection

from .compaction import CleanerStopped, CleanJob, CleanResult, WorkerDied, compact
from .throttle import throttle_for

logger = logging.getLogger("headwater.log")

PR_SET_PDEATHSIG = 1
WORKER_NICENESS = 10  # when the cores are busy, the broker's requests go first: compaction can wait


class CleanerWorker:
    def __init__(self, io_max_bytes_per_second: float | None = None):
        self.io_max_bytes_per_second = io_max_bytes_per_second
        self._process: subprocess.Popen | None = None
        self._jobs: Connection | None = None      # to the worker
        self._answers: Connection | None = None   # from it
        self._stopped = False
        self._lock = threading.Lock()  # starting and stopping: the cleaning thread and the event loop

    def run(self, job: CleanJob) -> CleanResult:
        """Clean in the worker; raises what the compaction raised, or WorkerDied."""
        jobs, answers = self._connect()
        try:
            jobs.send(job)
            ok, value = answers.recv()
        except (EOFError, OSError):
            code = self._reap()
            if self._stopped:
                raise CleanerStopped(f"the log cleaner worker was stopped while cleaning {job.directory.name}") \
                    from None
            raise WorkerDied(f"the log cleaner worker ended while cleaning {job.directory.name} "
                             f"(exit code {code})") from None
        if not ok:
            raise value
        return value

    def _connect(self) -> tuple[Connection, Connection]:
        with self._lock:
            if self._stopped:
                raise CleanerStopped("the log cleaner worker is stopped")
            if self._process is None or self._process.poll() is not None:
                self._reap_locked()
                rate = "" if self.io_max_bytes_per_second is None else str(self.io_max_bytes_per_second)
                # The broker's own import path, however it was set up, finds this module again.
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
                self._process = subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), rate],
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                self._jobs = Connection(os.dup(self._process.stdin.fileno()), readable=False)
                self._answers = Connection(os.dup(self._process.stdout.fileno()), writable=False)
                self._process.stdin.close()
                self._process.stdout.close()
                logger.info("log cleaner worker started (pid %d)", self._process.pid)
            return self._jobs, self._answers

    def _reap(self) -> int | None:
        with self._lock:
            return self._reap_locked()

    def _reap_locked(self) -> int | None:
        process, self._process = self._process, None
        for connection in (self._jobs, self._answers):
            if connection is not None:
                connection.close()
        self._jobs = self._answers = None
        return None if process is None else process.wait()

    def stop(self) -> None:
        """Kill the worker (a pass in it is dropped, its files deleted) and start no other."""
        with self._lock:
            self._stopped = True
            if self._process is not None and self._process.poll() is None:
                self._process.kill()


def serve(jobs: Connection, answers: Connection, io_max_bytes_per_second: float | None) -> None:
    """The worker's loop: one job at a time until the broker closes the pipe."""
    throttle = throttle_for(io_max_bytes_per_second)
    while True:
        try:
            job = jobs.recv()
        except EOFError:
            return
        try:
            answer = (True, compact(job, throttle))
        except Exception as exc:  # noqa: BLE001 - the broker decides what it means
            answer = (False, exc)
        answers.send(answer)


def _die_with(broker_pid: int) -> None:
    # The signal comes when the thread that started the worker ends: a thread of the broker's
    # maintenance pool, which lives as long as the broker (if not, the next pass starts another).
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != broker_pid:  # the broker died before the line above took effect
        os._exit(1)


def main() -> None:
    broker_pid, rate = sys.argv[1:3]
    _die_with(int(broker_pid))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the broker decides
    os.nice(WORKER_NICENESS)
    jobs, answers = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # whatever else writes to stdout must not garble the answers
    serve(jobs, answers, float(rate) if rate else None)


if __name__ == "__main__":
    main()
