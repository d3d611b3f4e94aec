"""Finishing or discarding a log cleaner swap that a crash interrupted.

The cleaner writes a segment's replacement as ``<base>.{log,index,timeindex}.cleaned``,
renames those to ``.swap`` (the ``.log.swap`` rename, done last, is the commit point) and
then renames them over the originals (indexes first, the ``.log`` last). So at open:

- ``.cleaned`` files were never committed: delete them;
- a ``<base>.log.swap`` was committed: move it over ``<base>.log``; an index whose
  ``.swap`` is already gone may be the old one or the new one, so delete it and let the
  segment rebuild it from the log;
- other ``.swap`` files (indexes of an uncommitted swap): delete them.
"""
from __future__ import annotations

import os
from pathlib import Path

from .segment import segment_name


def complete_interrupted_swaps(directory: Path) -> None:
    for leftover in directory.glob("*.cleaned"):
        leftover.unlink()
    for log_swap in directory.glob("*.log.swap"):
        base = int(log_swap.name.split(".")[0])
        for kind in (".index", ".timeindex"):
            final = directory / segment_name(base, kind)
            swap = final.with_name(final.name + ".swap")
            if swap.exists():
                os.replace(swap, final)
            else:
                final.unlink(missing_ok=True)
        os.replace(log_swap, directory / segment_name(base, ".log"))
    for leftover in directory.glob("*.swap"):
        leftover.unlink()
