"""Segment file descriptors: a bounded pool, least recently used closed first.

A segment that kept its ``.log`` open for its whole life would make descriptors grow with
partitions and segments, until the process hits its limit (EMFILE) and can no longer
accept a connection either. Segments borrow a descriptor from this pool for each read or
write instead; the limit is per process, so the pool is too. A descriptor in use (pinned)
is never closed under its user: the log cleaner and retention work on another thread.
"""
from __future__ import annotations

import os
import resource
import threading
from collections import OrderedDict
from pathlib import Path


class _Descriptor:
    """An open segment file; as a context manager, one pin of it (taken by ``OpenFiles.use``) that
    ends with the block. A class, not a generator's context manager: every append and read takes one."""
    __slots__ = ("fd", "pins", "doomed", "_lock")

    def __init__(self, fd: int, lock: threading.Lock):
        self.fd, self.pins, self.doomed, self._lock = fd, 0, False, lock

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc) -> None:
        with self._lock:
            self.pins -= 1
            if self.doomed and not self.pins:
                os.close(self.fd)


class OpenFiles:
    def __init__(self, capacity: int):
        self.capacity = capacity
        self._open: OrderedDict[Path, _Descriptor] = OrderedDict()   # oldest use first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def use(self, path: Path) -> _Descriptor:
        """A read-write descriptor of ``path`` (created if missing), pinned: ``with pool.use(path) as
        fd:`` keeps it open while the block runs."""
        with self._lock:
            entry = self._open.get(path)
            if entry is None:
                self._close_least_recent(self.capacity - 1)
                entry = self._open[path] = _Descriptor(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), self._lock)
            else:
                self._open.move_to_end(path)
            entry.pins += 1
        return entry

    def _close_least_recent(self, keep: int) -> None:
        victims: list[Path] = []
        for path, entry in self._open.items():   # oldest first
            if len(self._open) - len(victims) <= keep:
                break
            if not entry.pins:
                victims.append(path)
        for path in victims:
            os.close(self._open.pop(path).fd)

    def renamed(self, old: Path, new: Path) -> None:
        """``old`` was renamed to ``new``: an open descriptor follows the file."""
        with self._lock:
            entry = self._open.pop(old, None)
            if entry is not None:
                self._open[new] = entry

    def close(self, path: Path) -> None:
        with self._lock:
            entry = self._open.pop(path, None)
            if entry is None:
                return
            if entry.pins:
                entry.doomed = True   # its user closes it when done
            else:
                os.close(entry.fd)


def write_fully(fd: int, data, position: int) -> None:
    """pwrite all of ``data`` at ``position`` (a full disk can make a write short, then fail)."""
    view, written = memoryview(data), 0
    while written < len(view):
        written += os.pwrite(fd, view[written:], position + written)


def default_capacity() -> int:
    """A quarter of the process's descriptor limit: the rest is for connections and everything else."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(16, (soft if soft != resource.RLIM_INFINITY else 4096) // 4)


SEGMENT_FILES = OpenFiles(default_capacity())
