"""The `headwater` command."""
from __future__ import annotations

import argparse
import sys

from confluent_kafka import KafkaException

from headwater.cli import acls, broker, cdc, certs, events, groups, push, quotas, topics, transactions, users
from headwater.cli.common import CommandError

# each module: add_parser(subparsers) setting func(args) -> exit status
COMMANDS = [acls, broker, cdc, certs, events, groups, push, quotas, topics, transactions, users]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="headwater", description="Event streaming: a Kafka-compatible log broker, "
                                     "change data capture and stream processing on Spark.")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in COMMANDS:
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CommandError, KafkaException) as exc:
        print(f"headwater: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
