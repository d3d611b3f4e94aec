"""The `headwater` command."""
from __future__ import annotations

import argparse
import importlib
import signal
import sys
from importlib.metadata import PackageNotFoundError, version

from confluent_kafka import KafkaException

from headwater.cli.common import CommandError
from headwater.cli.long_running import Terminated, terminate

# command -> its module headwater.cli.<module>, whose add_parser(subparsers) sets func(args) -> exit status
COMMANDS = {"acls": "acls", "broker": "broker", "cdc": "cdc", "certs": "certs", "events": "events",
            "projections": "events", "groups": "groups", "pipelines": "pipelines", "push": "push", "quotas": "quotas",
            "schemas": "schemas", "topics": "topics", "transactions": "transactions", "users": "users"}


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


def _talks_to_broker_once(args: argparse.Namespace) -> bool:
    """A one-shot command about to ask the broker: not a long-running one (it waits for the
    broker instead), nor one given a data directory to edit (--offline)."""
    return bool(getattr(args, "bootstrap_server", None)) and not getattr(args, "waits_for_broker", False) \
        and not (getattr(args, "offline", False) or getattr(args, "data_dir", None))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    # A command with a StopRequest of its own replaces these; main puts back what it found (for callers in-process).
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where a shell started us with SIGINT ignored
    try:
        if _talks_to_broker_once(args):
            from headwater.cli.reachability import require_broker
            require_broker(args.bootstrap_server, args.command_config)  # one-shot: one timeout, one message
        return args.func(args)
    except (CommandError, KafkaException) as exc:
        print(f"headwater: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Terminated:
        return 143
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
