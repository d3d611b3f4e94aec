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

from .layout import CLEANED, INDEX, LOG, SWAP, TIME_INDEX, base_offset_of, segment_file


def complete_interrupted_swaps(directory: Path) -> None:
    for leftover in directory.glob("*" + CLEANED):
        leftover.unlink()
    for log_swap in directory.glob("*" + LOG + SWAP):
        base = base_offset_of(log_swap)
        if base is None:
            continue  # not a segment's: the sweep below removes it
        for kind in (INDEX, TIME_INDEX):
            final, swap = segment_file(directory, base, kind), segment_file(directory, base, kind + SWAP)
            if swap.exists():
                os.replace(swap, final)
            else:
                final.unlink(missing_ok=True)
        os.replace(log_swap, segment_file(directory, base, LOG))
    for leftover in directory.glob("*" + SWAP):
        leftover.unlink()
