"""Start real brokers as subprocesses, and build bad batches: for tests, the demo and benchmarks."""
from __future__ import annotations

import dataclasses
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import cramjam

from headwater import records

READY = "headwater broker listening on "


class BrokerProcess:
    """A `headwater broker` child process on an ephemeral loopback port."""

    def __init__(self, data_dir: Path, *extra_args: str, port: int = 0, log_file: Path | None = None,
                 open_files: int | None = None):
        self.data_dir = Path(data_dir)
        self.extra_args = extra_args
        self.port = port
        self.open_files = open_files   # the broker's RLIMIT_NOFILE, when a test lowers it
        self.log_file = log_file or self.data_dir.with_name(self.data_dir.name + ".broker.log")
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "BrokerProcess":
        cmd = [sys.executable, "-m", "headwater", "broker", "--data-dir", str(self.data_dir),
               "--port", str(self.port), *self.extra_args]
        log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                     preexec_fn=self._limit if self.open_files else None)
        log.close()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line.startswith(READY):
            self.proc.kill()
            raise RuntimeError(f"broker did not start: {line!r}; see {self.log_file}:\n{self.log_file.read_text()[-2000:]}")
        self.port = int(line.rsplit(":", 1)[1])  # keep the port across restarts
        return self

    def _limit(self) -> None:
        if self.open_files is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait: a clean shutdown. Returns the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed that was not already."""
        self.proc.kill()
        self.proc.wait()

    def rss_bytes(self) -> int:
        """The broker's resident memory now, from /proc (Linux)."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no VmRSS for process {self.proc.pid}")

    def restart(self) -> "BrokerProcess":
        return self.start()

    def __enter__(self) -> "BrokerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()


def start_broker(data_dir: Path, *extra_args: str) -> BrokerProcess:
    return BrokerProcess(data_dir, *extra_args).start()



def wait_until(condition, timeout=60, interval=0.3, what="condition"):
    """Poll until `condition()` returns a truthy value, and return it; raise TimeoutError
    after `timeout` seconds. For background work (a rebalance, a cleaner pass, a
    connector) becoming visible."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def rebuilt_batch(batch: bytes, body: bytes | None = None, **fields) -> bytes:
    """``batch`` with another records section and/or header fields (BatchHeader's names), its
    length and CRC made right: a bad batch that only the log validator can refuse."""
    header = records.read_header(batch)
    body = batch[records.HEADER_SIZE:] if body is None else body
    values = dataclasses.asdict(header) | {"batch_length": records.MIN_BATCH_LENGTH + len(body)} | fields
    out = bytearray(records.HEADER.pack(*values.values()) + body)
    records.reseal_crc(out)
    return bytes(out)


def zstd_bomb(size: int) -> bytes:
    """A one-record batch whose zstd body decompresses to ``size`` zero bytes (a few KiB
    for 1 GiB); compressed a MiB at a time, so the zeros never exist whole."""
    compressor = cramjam.zstd.Compressor()
    for _ in range(size >> 20):
        compressor.compress(bytes(1 << 20))
    one = records.encode_batch([records.Record(0, 0, b"k", b"v")])
    return rebuilt_batch(one, bytes(compressor.finish()), attributes=int(records.Compression.ZSTD))
