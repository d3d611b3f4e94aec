"""A disk that fills up: a small tmpfs mounted for one test (needs root, as CI has)."""
import errno
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_disk(path: Path, size: str = "8m"):
    if os.geteuid() != 0:
        message = "mounting a tmpfs needs root"
        pytest.fail(message) if os.environ.get("CI") == "true" else pytest.skip(message)
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "--lazy", str(path)], check=True)


def fill_up(disk: Path) -> Path:
    """Write a filler file until the disk is full (ENOSPC); returns it, to free the space again."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as f:
        for chunk_size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    f.write(b"\0" * chunk_size)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
    return filler
