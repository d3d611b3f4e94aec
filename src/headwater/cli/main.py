"""The `headwater` command."""
from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import PackageNotFoundError, version

from confluent_kafka import KafkaException

from headwater.cli.common import CommandError

# command -> its module headwater.cli.<module>, whose add_parser(subparsers) sets func(args) -> exit status
COMMANDS = {"acls": "acls", "broker": "broker", "cdc": "cdc", "certs": "certs", "events": "events",
            "projections": "events", "groups": "groups", "pipelines": "pipelines", "push": "push", "quotas": "quotas",
            "topics": "topics", "transactions": "transactions", "users": "users"}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser for ``argv``: only the named command's module is imported, since importing them
    all (the broker, Spark, ...) would make every short command slow to start."""
    parser = argparse.ArgumentParser(prog="headwater", description="Event streaming: a Kafka-compatible log broker, "
                                     "change data capture and stream processing on Spark.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True)
    named = [COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in named:
        importlib.import_module(f"headwater.cli.{module}").add_parser(subparsers)
    _name_choices(parser)
    return parser


def _version() -> str:
    try:
        return version("headwater")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


def _name_choices(parser: argparse.ArgumentParser) -> None:
    """A missing subcommand is reported by its choices ('required: {create,list,...}'), not by
    the internal name its value is kept under (the dest, e.g. 'topics_action')."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.metavar = action.metavar or "{" + ",".join(action.choices) + "}"
            for subparser in set(action.choices.values()):
                _name_choices(subparser)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, KafkaException) as exc:
        print(f"headwater: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
