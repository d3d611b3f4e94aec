"""The files of a data directory: their names, and how one is replaced durably.

Every file name the storage engine writes is spelled here, and nowhere else::

    <data_dir>/catalog.json                  the topics (manager.py)
    <data_dir>/producer-id-block             the next block of idempotent producer ids
    <data_dir>/<topic>-<partition>/          one log (partition.py)
        <20-digit base offset>.log           a segment's record batches (segment.py)
        <20-digit base offset>.index         its offset index (index.py)
        <20-digit base offset>.timeindex     its time index
        ... + .cleaned / .swap               a log cleaner rewrite before / after its commit (recovery.py)
        recovery-point, log-start-offset, cleaner-checkpoint
        cleaner-uncleanable                  why the cleaner set this log aside (delete it to retry)
        aborted-transactions                 the aborted-transaction index (txn_index.py)
        producer-snapshot                    idempotent producers' sequences (broker/producer_state.py)
        .clean-shutdown
    <data_dir>/<hex>.deleted/                a log on its way out
    <any of the above>.tmp                   a replacement being written

The base offset is zero-padded so that file names sort in offset order.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

LOG = ".log"
INDEX = ".index"
TIME_INDEX = ".timeindex"
SEGMENT_SUFFIXES = (LOG, INDEX, TIME_INDEX)
CLEANED = ".cleaned"   # a cleaner rewrite being written: never committed
SWAP = ".swap"         # a cleaner rewrite committed, not yet renamed over the segment
TMP = ".tmp"
DELETED = ".deleted"

CATALOG = "catalog.json"
PRODUCER_ID_BLOCK = "producer-id-block"
CLEAN_SHUTDOWN = ".clean-shutdown"
RECOVERY_POINT = "recovery-point"
LOG_START_OFFSET = "log-start-offset"
CLEANER_CHECKPOINT = "cleaner-checkpoint"
UNCLEANABLE = "cleaner-uncleanable"
ABORTED_TRANSACTIONS = "aborted-transactions"
PRODUCER_SNAPSHOT = "producer-snapshot"

_BASE_OFFSET_DIGITS = 20


class CorruptFile(Exception):
    """A file of the data directory that does not parse: nothing may guess at what it held."""


def read_json(path: Path, missing: object) -> object:
    """The JSON in ``path``; ``missing`` if there is no such file; CorruptFile if it does not parse."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return missing
    except ValueError as exc:   # JSONDecodeError and UnicodeDecodeError both are
        raise CorruptFile(f"{path} is not valid JSON ({exc}): restore it from a backup "
                          "(nothing here guesses at what it held)") from None


def partition_dir(data_dir: Path, topic: str, partition: int) -> Path:
    return data_dir / f"{topic}-{partition}"


def segment_file(directory: Path, base_offset: int, suffix: str) -> Path:
    """``<directory>/<20-digit base offset><suffix>``, e.g. ``00000000000000000042.log``."""
    return directory / f"{base_offset:0{_BASE_OFFSET_DIGITS}d}{suffix}"


def base_offset_of(path: Path) -> int | None:
    """The base offset a segment file name starts with; None for a name that is no segment file's."""
    prefix = path.name.split(".", 1)[0]
    return int(prefix) if len(prefix) == _BASE_OFFSET_DIGITS and prefix.isdigit() else None


def segment_base_offsets(directory: Path) -> list[int]:
    """The base offsets of the segments (``.log`` files) in ``directory``, in order."""
    bases = (base_offset_of(path) for path in directory.glob("*" + LOG))
    return sorted(base for base in bases if base is not None)


def fsync_directory(path: Path) -> None:
    """Make the creations, renames and deletions in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, text: str, durable: bool = True) -> None:
    """Make ``path`` hold ``text``: a reader, or a restart, finds the old content or the new, never a mix.

    The new content is written beside it as ``.tmp`` and renamed over it. ``durable``: the
    content is fsynced before the rename and the directory after it, so the new content
    survives a crash once this returns; without it a crash may bring back the old one."""
    tmp = path.with_name(path.name + TMP)
    try:
        with open(tmp, "w") as f:
            f.write(text)
            if durable:
                f.flush()
                os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: give back what the partial copy took
        raise
    os.replace(tmp, path)
    if durable:
        fsync_directory(path.parent)
