"""The text of a /metrics scrape: prometheus_client's ``generate_latest``, byte for byte, with the
lines of a labelled gauge family written in bulk.

``generate_latest`` checks and escapes every label name and value of every sample, sorts its
labels and formats its value one sample at a time (~8 µs a sample): at 10,000 partitions, whose
offsets, sizes and group lags are a handful of samples each, that was most of a 0.5 s scrape. A
gauge family's label names are the same for all its samples, so here they are checked once, each
distinct label value escaped once, and only the value formatted per sample (with the library's
``floatToGoString``). Every other family, and a gauge this cannot write exactly as the library
would, goes through ``generate_latest`` itself; tests/http/test_exposition.py compares the two.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

# The Prometheus data model's plain names, which the text format writes unquoted; a name outside
# them (or a label name starting "__", reserved) is left to generate_latest.
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"(?!__)[a-zA-Z_][a-zA-Z0-9_]*")


class _Families(Collector):
    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families


def exposition(families: Iterable[Metric]) -> bytes:
    """What ``generate_latest`` writes for ``families`` (a pure function of them: safe off the loop)."""
    return b"".join(_text(family) for family in families)


def _text(family: Metric) -> bytes:
    lines = _gauge_lines(family)
    if lines is None:
        return generate_latest(_Families([family]))
    header = Metric(family.name, family.documentation, family.type, family.unit)   # HELP and TYPE, no samples
    return generate_latest(_Families([header])) + "".join(lines).encode()


def _gauge_lines(family: Metric) -> list[str] | None:
    """generate_latest's sample lines of a labelled gauge family, or None where it must write them itself
    (another type, a sample with a timestamp or an exemplar, label names it would have to escape)."""
    samples = family.samples
    if family.type != "gauge" or not samples or not _METRIC_NAME.fullmatch(family.name):
        return None
    names = sorted(samples[0].labels)
    if not names or not all(_LABEL_NAME.fullmatch(name) for name in names):
        return None
    name, count = family.name, len(names)
    escaped: list[dict[str, str]] = [{} for _ in names]   # per label name: value -> 'name="value"'
    lines = []
    for sample in samples:
        labels = sample.labels
        if sample.name != name or sample.timestamp is not None or sample.exemplar is not None or len(labels) != count:
            return None
        parts = []
        for label, cache in zip(names, escaped):
            value = labels.get(label)
            if value is None:
                return None   # another label name
            text = cache.get(value)
            if text is None:
                text = cache[value] = f'{label}="{_escape(value)}"'
            parts.append(text)
        lines.append(f"{name}{{{','.join(parts)}}} {floatToGoString(sample.value)}\n")
    return lines


def _escape(value: str) -> str:
    """A label value as the text format writes it (generate_latest allows any UTF-8 in values)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
