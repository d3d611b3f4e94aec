"""The StatsD line protocol, parsed into one JSON-ready metric per value.

A datagram holds lines `name:value[:value...]|type[|@sample_rate][|#tag,tag:value]`, separated
by newlines. Types: c counter, g gauge (a leading + or - makes it a delta), ms timer,
h histogram, s set (any string value). Tags are DogStatsD's extension.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

TYPES = {"c": "counter", "g": "gauge", "ms": "timer", "h": "histogram", "s": "set"}


class MalformedLine(ValueError):
    pass


@dataclass(frozen=True)
class Metric:
    name: str
    type: str
    value: float | str
    sample_rate: float = 1.0
    delta: bool = False  # a gauge change (+N / -N) rather than a new value
    tags: tuple[tuple[str, str | None], ...] = ()

    def as_json(self) -> dict:
        out = {"name": self.name, "type": self.type, "value": self.value, "sample_rate": self.sample_rate}
        if self.type == "gauge":
            out["delta"] = self.delta
        if self.tags:
            out["tags"] = dict(self.tags)
        return out


def parse_datagram(datagram: bytes) -> tuple[list[Metric], int]:
    """The metrics of a datagram and how many of its lines were malformed (and skipped)."""
    metrics, malformed = [], 0
    for raw in datagram.split(b"\n"):
        if not raw.strip():
            continue
        try:
            metrics.extend(parse_line(raw.decode("utf-8").strip()))
        except (MalformedLine, UnicodeDecodeError):
            malformed += 1
    return metrics, malformed


def parse_line(line: str) -> list[Metric]:
    name, sep, rest = line.partition(":")
    if not sep or not name or "|" in name:
        raise MalformedLine(f"no metric name in {line!r}")
    values, *fields = rest.split("|")
    if not fields or fields[0] not in TYPES:
        raise MalformedLine(f"unknown or missing type in {line!r}")
    kind = TYPES[fields[0]]
    rate, tags = 1.0, ()
    for extra in fields[1:]:
        if extra.startswith("@"):
            rate = _number(extra[1:], line)
            if not 0 < rate <= 1:
                raise MalformedLine(f"sample rate out of (0, 1] in {line!r}")
        elif extra.startswith("#"):
            tags = tuple((k, v if sep else None) for k, sep, v in (t.partition(":") for t in extra[1:].split(",") if t))
        else:
            raise MalformedLine(f"unknown field {extra!r} in {line!r}")
    return [_metric(name, kind, value, rate, tags, line) for value in values.split(":")]


def _metric(name: str, kind: str, value: str, rate: float, tags, line: str) -> Metric:
    if kind == "set":
        if not value:
            raise MalformedLine(f"empty set member in {line!r}")
        return Metric(name, kind, value, rate, tags=tags)
    number = _number(value, line)
    return Metric(name, kind, number, rate, delta=kind == "gauge" and value[:1] in "+-", tags=tags)


def _number(text: str, line: str) -> float:
    try:
        number = float(text)
    except ValueError:
        raise MalformedLine(f"{text!r} is not a number in {line!r}") from None
    if not math.isfinite(number):
        raise MalformedLine(f"{text!r} is not finite in {line!r}")
    return int(number) if number.is_integer() and "." not in text and "e" not in text.lower() else number
