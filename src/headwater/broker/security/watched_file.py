"""A small JSON file that the CLI replaces (atomically) while a broker reads it: read again when it changed.

The broker consults it on every request (ACLs) or login (users): it looks at the file at most
once a second, so a change by ``headwater acls``/``users`` takes effect within a second, and
one made through the broker's own APIs at once."""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from headwater.log.layout import CorruptFile, read_json

T = TypeVar("T")
logger = logging.getLogger(__name__)
CHECK_INTERVAL_S = 1.0


class WatchedJson(Generic[T]):
    def __init__(self, path: Path, parse: Callable[[object], T], empty: object,
                 now: Callable[[], float] = time.monotonic):
        self.path = path
        self._now = now
        self._parse = parse
        self._empty = empty
        self._value: T = parse(empty)
        self._stamp: tuple[int, int] | None = None  # (mtime, inode) of the file last read
        self._checked_at = float("-inf")
        self._started = False
        self.load()   # a corrupt file refuses the start (CorruptFile); later, the last good content stays
        self._started = True

    def load(self) -> T:
        now = self._now()
        if now - self._checked_at < CHECK_INTERVAL_S:
            return self._value
        self._checked_at = now
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._value, self._stamp = self._parse(self._empty), None
            return self._value
        if (st.st_mtime_ns, st.st_ino) != self._stamp:
            try:
                self._value = self._parse(read_json(self.path, self._empty))
            except CorruptFile as exc:
                if not self._started:
                    raise
                logger.error("%s; still using its last good content", exc)
            self._stamp = (st.st_mtime_ns, st.st_ino)
        return self._value

    def save(self, raw: object) -> None:
        """Write to a new file (owner-only), fsync, rename over: a reader sees the old or the new file whole."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(raw, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        self._stamp, self._checked_at = None, float("-inf")
