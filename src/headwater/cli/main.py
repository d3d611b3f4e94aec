"""The `headwater` command."""
from __future__ import annotations

import argparse
import gc
import importlib
import signal
import sys
import traceback
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


def main(argv: list[str] | None = None, exiting: bool = False) -> int:
    """Run the command ``argv`` names and return its exit status. ``exiting``: the process ends
    once main returns (`python -m headwater`)."""
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    # A command with a StopRequest of its own replaces these; main puts back what it found (for callers in-process).
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also where a shell started us with SIGINT ignored
    try:
        status = _run(args)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if exiting and not getattr(args, "waits_for_broker", False):
        # Frozen, the objects are not walked by the interpreter's collections at exit (~0.05 s of
        # CPU a command, ~0.2 s a broker's stop: numba's objects the most). Not after a
        # long-running command: its clients (cdc's, the relay's, push's) sit in cycles with their
        # owners, which only those collections break, destroying the clients as before.
        gc.freeze()
    return status


def _run(args: argparse.Namespace) -> int:
    """The command's exit status; a failure in one line, its frames let go of (see _let_go)."""
    try:
        if _talks_to_broker_once(args):
            from headwater.cli.reachability import require_broker
            require_broker(args.bootstrap_server, args.command_config)  # one-shot: one timeout, one message
        return args.func(args)
    except (CommandError, KafkaException) as exc:
        print(f"headwater: error: {exc}", file=sys.stderr)
        return _let_go(exc, 1)
    except KeyboardInterrupt as exc:
        return _let_go(exc, 130)
    except Terminated as exc:
        return _let_go(exc, 143)


def _let_go(exc: BaseException, status: int) -> int:
    """``status``, once the frames of ``exc``'s traceback, and of the exceptions chained to it,
    have dropped their locals. A librdkafka client held there (e.g. `topics list` with a refused
    login: AdminClient.list_topics' own frame, in the traceback of the KafkaException a cycle
    keeps) is destroyed now, while the interpreter is whole, rather than by a collection, which
    main's gc.freeze() leaves to none: its threads then called back into a finalizing
    interpreter (SIGSEGV at exit, 1 run in 15-100)."""
    pending, seen = [exc], set()
    while pending:
        exc = pending.pop()
        if exc is not None and id(exc) not in seen:
            seen.add(id(exc))
            traceback.clear_frames(exc.__traceback__)  # skips the frames still running (main's own)
            pending += [exc.__cause__, exc.__context__]
    return status


if __name__ == "__main__":
    sys.exit(main())
