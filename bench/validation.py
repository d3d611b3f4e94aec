"""What the produce-time log validator costs, and what it leaves the event loop.

    .venv/bin/python bench/validation.py [--repeat N] [--smoke]

1. ``records.validator.validate_produce`` per batch, in-process, per codec and batch size (100-byte
   values, keyed): microseconds per batch and records per second of one core. Before the
   validator the broker read only the 61-byte header and the CRC; that cost is the first column.
   The compiled walk (``records.compiled_walk``, loaded first as the broker loads it) walks the
   records; the Python walk only words a refusal.
2. The longest pause of the event loop (a task that wakes every millisecond measures the
   gaps) while one batch is validated inline on the loop, and on another thread as the
   broker does for compressed batches and for uncompressed ones of 256 KiB or more.
There is no peer: Kafka's LogValidator runs in a JVM, which cannot be installed here.
"""
from __future__ import annotations

import argparse
import asyncio
import time

from rich.console import Console
from rich.table import Table

from headwater.records import Compression, Record, encode_batch, iter_batches
from headwater.records.layout import DECOMPRESSION_RATIO, MESSAGE_MAX_BYTES
from headwater.records.validator import load_compiled_walk, validate_produce
from headwater.testing import bench_arguments, zstd_bomb

LIMIT = DECOMPRESSION_RATIO * MESSAGE_MAX_BYTES  # what the broker allows a batch to decompress to by default


def batch(codec: Compression, n: int) -> bytearray:
    return bytearray(encode_batch([Record(i, 1_700_000_000_000 + i, b"key-%d" % (i % 100), b"x" * 100)
                                   for i in range(n)], compression=codec))


def per_batch(buf: bytearray, repeat: int, work) -> float:
    start = time.perf_counter()
    for _ in range(repeat):
        work(buf)
    return (time.perf_counter() - start) / repeat


async def longest_pause(work, off_loop: bool) -> float:
    """Seconds of the longest gap between 1 ms ticks while ``work`` runs once."""
    gaps, done = [], asyncio.Event()

    async def ticker():
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
    task = asyncio.create_task(ticker())
    await asyncio.sleep(0.01)
    gaps.clear()
    if off_loop:
        await asyncio.to_thread(work)
    else:
        work()
    await asyncio.sleep(0.005)
    done.set()
    await task
    return max(gaps)


def validate(buf) -> None:
    try:
        validate_produce(buf, max_uncompressed_bytes=LIMIT)
    except ValueError:
        pass  # the bomb is refused: its cost is the point


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = bench_arguments(parser, {"repeat": 1})

    table = Table(title="Produce-time validation per batch (100-byte values), one core")
    for column in ("codec", "records", "batch bytes", "header+CRC us", "validator us", "validator records/s"):
        table.add_column(column, justify="right")
    cases = [(codec.name.lower(), batch(codec, n)) for codec in Compression for n in (1, 100, 8000)]
    load_compiled_walk()   # as the broker does when it starts
    for name, buf in cases:
        n = sum(header.records_count for _, header in iter_batches(buf))
        header_only = per_batch(buf, args.repeat, lambda b: list(iter_batches(b)))
        full = per_batch(buf, args.repeat, validate)
        table.add_row(name, f"{n:,}", f"{len(buf):,}", f"{header_only * 1e6:,.1f}", f"{full * 1e6:,.1f}",
                      f"{n / full:,.0f}")
    Console().print(table)

    pauses = Table(title="Longest event-loop pause while one batch is validated (ms)")
    for column in ("batch", "inline", "on a thread"):
        pauses.add_column(column, justify="right")
    for name, buf in (("none, 8,000 records (0.9 MB)", batch(Compression.NONE, 8000)),
                      ("zstd, 8,000 records", batch(Compression.ZSTD, 8000)),
                      ("zstd bomb: 1 GiB of zeros", bytearray(zstd_bomb(1 << 30)))):
        inline = asyncio.run(longest_pause(lambda: validate(buf), off_loop=False))
        threaded = asyncio.run(longest_pause(lambda: validate(buf), off_loop=True))
        pauses.add_row(name, f"{inline * 1e3:,.1f}", f"{threaded * 1e3:,.1f}")
    Console().print(pauses)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
