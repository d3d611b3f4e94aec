"""Conventions every client-side command shares: where the broker is, tables or JSON, one-line errors."""
from __future__ import annotations

import json
import os
import sys

from rich.console import Console
from rich.table import Table

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"


class CommandError(Exception):
    """A problem to report to the user in one line (no traceback), exit status 1."""


def add_client_args(parser) -> None:
    parser.add_argument("--bootstrap-server", default=os.environ.get("HEADWATER_BOOTSTRAP", DEFAULT_BOOTSTRAP),
                        help="broker address HOST:PORT (default: $HEADWATER_BOOTSTRAP, then %(default)s)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")


def emit(args, rows: list[dict], title: str | None = None) -> None:
    """Print rows as a table, or as a JSON list with --json."""
    if getattr(args, "json", False):
        json.dump(rows, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    table = Table(title=title)
    for column in (rows[0].keys() if rows else []):
        table.add_column(column, justify="right" if isinstance(rows[0][column], (int, float)) else "left")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    Console().print(table)
