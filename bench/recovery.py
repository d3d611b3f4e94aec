"""Log recovery time after an unclean stop, by data size: from the recovery point versus the whole segment.

    .venv/bin/python bench/recovery.py [--sizes 10 50 200] [--tail-mb 1] [--smoke]

In-process, on the storage engine: one partition whose active segment holds SIZE MB of
one-record batches (100-byte values, the worst case per byte: recovery works per batch).
Everything but the last TAIL MB is flushed and checkpointed (as every
``log.flush.offset.checkpoint.interval.ms``), so the recovery point sits near the end; then
the log is dropped as a SIGKILL would leave it (no close, no clean-shutdown marker) and
``Log.open`` timed three ways: from the recovery point, with no recovery point (the
``recovery-point`` file removed: every batch validated), and after a clean shutdown.
The files are in the page cache each time: this measures the validation, not the disk.
There is no peer: no Kafka (JVM) broker can be installed here.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console

from headwater.log import Log, LogConfig
from headwater.log.files import SEGMENT_FILES
from headwater.records import Record, encode_batch

from tables import table  # bench/tables.py

CONFIG = LogConfig(segment_bytes=(1 << 31) - 1)   # one active segment, however big the run
CHUNK = 1000                                     # batches per append call


def one_record_batch() -> bytes:
    return encode_batch([Record(0, int(time.time() * 1000), b"key-0001", b"v" * 100)])


def write(log: Log, megabytes: float) -> int:
    """Append one-record batches until the log holds ``megabytes``; returns how many."""
    chunk = one_record_batch() * CHUNK
    written = 0
    while log.size_bytes < megabytes * 1e6:
        log.append(bytearray(chunk))
        written += CHUNK
    return written


def crash(log: Log) -> None:
    """What a SIGKILL leaves: descriptors gone, nothing closed, no marker."""
    for segment in log.segments:
        SEGMENT_FILES.close(segment.path)


def timed_open(directory: Path) -> tuple[float, Log]:
    start = time.perf_counter()
    log = Log.open(directory, CONFIG)
    return time.perf_counter() - start, log


def measure(megabytes: float, tail_mb: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="hw-recovery-bench-") as tmp:
        directory = Path(tmp) / "bench-0"
        log = Log.open(directory, CONFIG)
        batches = write(log, megabytes - tail_mb)
        log.checkpoint()
        batches += write(log, megabytes)
        end, size = log.log_end_offset, log.size_bytes
        crash(log)

        from_point, log = timed_open(directory)
        assert log.log_end_offset == end
        crash(log)
        (directory / "recovery-point").unlink()
        whole, log = timed_open(directory)
        assert log.log_end_offset == end
        log.close()
        clean, log = timed_open(directory)
        assert log.log_end_offset == end
        log.close()
    return {"data MB": f"{size / 1e6:.0f}", "batches": f"{batches:,}", "from recovery point s": f"{from_point:.3f}",
            "whole segment s": f"{whole:.3f}", "µs/batch whole": f"{whole / batches * 1e6:.1f}",
            "clean shutdown s": f"{clean:.3f}"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[10, 50, 200], metavar="MB",
                        help="data sizes to recover, in MB (default %(default)s)")
    parser.add_argument("--tail-mb", type=float, default=1, help="MB written after the recovery point")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 2 and 5 MB")
    args = parser.parse_args()
    sizes, tail = ([2, 5], 0.5) if args.smoke else (args.sizes, args.tail_mb)
    rows = [measure(size, tail) for size in sizes]
    Console(width=160).print(table(f"log recovery after an unclean stop: one-record batches of 100-byte values, {tail:g} MB "
                          "past the recovery point", rows))


if __name__ == "__main__":
    main()
