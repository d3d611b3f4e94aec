"""--offline: commands that edit a stopped broker's files in its data directory (the ACLs, the
SASL users) instead of asking a running broker. Besides the broker, only these commands read a
data directory, so only they import the storage layer that names its errors."""
from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from headwater.cli.common import CommandError, data_dir
from headwater.log.layout import CorruptFile


def add_offline_args(parser, what: str) -> None:
    parser.add_argument("--offline", action="store_true",
                        help=f"edit the {what} in a broker's --data-dir instead of asking a running broker "
                             "(e.g. the first admin user of a secured broker, before it starts)")
    parser.add_argument("--data-dir", type=data_dir, help="the broker's data directory (with --offline)")


def offline_dir(args) -> Path | None:
    """The data directory an --offline command edits; None: ask the broker over the wire."""
    if args.offline != (args.data_dir is not None):
        raise CommandError("--offline and --data-dir go together: --offline --data-dir DIR edits a broker's "
                           "files; without them the command asks the broker at --bootstrap-server")
    return args.data_dir


def edits(command: Callable[..., int]) -> Callable[..., int]:
    """``command``, a file of the data directory that does not parse being its error (one line,
    nothing changed) rather than a traceback."""
    @functools.wraps(command)
    def run(args) -> int:
        try:
            return command(args)
        except CorruptFile as exc:
            raise CommandError(str(exc)) from exc
    return run
