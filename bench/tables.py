"""The benchmarks' one output shape: a rich table of rows of figures."""
from __future__ import annotations

from rich.table import Table


def table(title: str, rows: list[dict]) -> Table:
    t = Table(title=title)
    for column in rows[0]:
        t.add_column(column, justify="right")
    for row in rows:
        t.add_row(*row.values())
    return t
