"""Message search for the console: filters over a topic's records, with bounded work per request.

A search reads at most ``budget`` records (all partitions together) and keeps at most ``shown``
matches, then stops and says where it stopped, so one request never walks a whole large log
on the broker's event loop; the page offers to continue from there. JSON path expressions
are jsonpath-ng's (its extended syntax: filters such as ``$.items[?(@.qty > 2)]``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from jsonpath_ng.ext import parse as parse_path

from headwater.http.state import records_from
from headwater.log import Log
from headwater.records import Record

SCAN_BUDGET = 10_000   # records read per request, at most
SHOWN = 100            # matches kept per request, at most
NO_MATCH = object()


class BadFilter(ValueError):
    """A filter that cannot be applied (a malformed JSON path): said to the user as is."""


@dataclass(frozen=True)
class Filter:
    """Every given criterion must hold; an empty Filter matches every record."""
    key: str = ""
    key_exact: bool = False           # key equals ``key``, else contains it
    value: str = ""                   # the value contains this text
    path: str = ""                    # a JSON path that must select something in the value...
    equals: str = ""                  # ...equal to this (JSON, else a string), when given
    header: str = ""                  # a header of this name...
    header_value: str = ""            # ...whose value contains this text, when given
    since: int | None = None          # timestamp at or after (Unix ms)
    until: int | None = None          # timestamp at or before (Unix ms)
    _compiled: object = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.path:
            try:
                object.__setattr__(self, "_compiled", parse_path(self.path))
            except Exception as exc:   # jsonpath-ng's lexer raises plain Exceptions, its parser JSONPathError
                raise BadFilter(f"JSON path {self.path!r}: {exc}") from None
        if self.equals and not self.path:
            raise BadFilter("a value to equal needs a JSON path to select it")

    def matches(self, record: Record) -> bool:
        if self.since is not None and record.timestamp < self.since:
            return False
        if self.until is not None and record.timestamp > self.until:
            return False
        if self.key:
            key = _text(record.key)
            if key is None or (key != self.key if self.key_exact else self.key not in key):
                return False
        if self.value and self.value not in (_text(record.value) or ""):
            return False
        if self.header and not any(name == self.header and self.header_value in (_text(value) or "")
                                   for name, value in record.headers):
            return False
        return not self.path or self._selects(record.value)

    def _selects(self, value: bytes | None) -> bool:
        try:
            document = json.loads(value) if value is not None else NO_MATCH
        except (ValueError, UnicodeDecodeError):
            return False
        if document is NO_MATCH:
            return False
        found = [m.value for m in self._compiled.find(document)]
        if not self.equals:
            return bool(found)
        return _literal(self.equals) in found


def _literal(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", "replace")


@dataclass
class Found:
    matches: list[tuple[int, Record]]   # (partition, record), by partition then offset
    scanned: int                        # records read
    positions: dict[int, int]           # partition -> where a continuation starts
    done: bool                          # every partition searched to its end (read_committed: its last stable offset)


def search(partitions: list[tuple[int, Log, int, int | None]], where: Filter, budget: int = SCAN_BUDGET,
           shown: int = SHOWN) -> Found:
    """Search each (index, log, start offset, read_committed end or None) in turn, within the budget."""
    matches: list[tuple[int, Record]] = []
    scanned = 0
    positions = {index: start for index, _, start, _ in partitions}
    for index, plog, start, upto in partitions:
        position, end = max(start, plog.log_start_offset), _end(plog, upto)
        while position < end and scanned < budget and len(matches) < shown:
            batch = records_from(plog, position, min(budget - scanned, 500), upto)
            if not batch:   # only control batches (or nothing) left
                position = end
                break
            for record in batch:
                scanned += 1
                position = record.offset + 1
                if where.matches(record):
                    matches.append((index, record))
                    if len(matches) >= shown:
                        break
        positions[index] = position
    done = all(positions[index] >= _end(plog, upto) for index, plog, _, upto in partitions)
    return Found(matches, scanned, positions, done)


def _end(plog: Log, upto: int | None) -> int:
    return plog.log_end_offset if upto is None else upto
