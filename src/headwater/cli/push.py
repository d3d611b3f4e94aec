"""`headwater push`: a push subscription, delivering each record of a topic to an HTTP endpoint."""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import urllib.parse

from headwater.cli.common import add_connection_args, name_value, positive_float, positive_int
from headwater.cli.long_running import StopRequest
from headwater.push.retry import Backoff
from headwater.push.subscription import PushConfig, PushSubscription


def _url(text: str) -> str:
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(f"expected an http:// or https:// URL, got {text!r}")
    return text


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("push", help="deliver each record of a topic to an HTTP endpoint (webhook)",
                              description="Consume TOPIC as consumer group --group and POST each record to "
                              "ENDPOINT (body and headers: docs/messaging.md). A 2xx acknowledges; anything "
                              "else is retried with exponential backoff and jitter, then dead-lettered.")
    p.add_argument("topic")
    p.add_argument("endpoint", type=_url, help="http:// or https:// URL the records are POSTed to")
    p.add_argument("--group", help="consumer group (default: push-TOPIC)")
    p.add_argument("--dead-letter-topic", help="where records go after --max-attempts (default: TOPIC.dlq)")
    p.add_argument("--max-attempts", type=positive_int, default=10, help="attempts per record (default %(default)s)")
    p.add_argument("--max-in-flight", type=positive_int, default=16,
                   help="records outstanding at once: delivering, backing off or waiting their key's turn "
                   "(default %(default)s)")
    p.add_argument("--ordering", choices=("none", "key"), default="none",
                   help="key: one record at a time per key, in offset order; none: in parallel (default)")
    p.add_argument("--batch-size", type=positive_int, default=1,
                   help="records of one partition per POST, as a JSON array (default %(default)s: one record, "
                   "a JSON object); --max-in-flight then counts batches")
    p.add_argument("--batch-wait", type=positive_float, default=0.05,
                   help="seconds a batch may wait to fill up before it is sent (default %(default)s)")
    p.add_argument("--batch-attempts", type=positive_int, default=3,
                   help="failures of a whole batch before its records are delivered one by one, each with "
                   "--max-attempts (default %(default)s)")
    p.add_argument("--timeout", type=positive_float, default=10.0, help="seconds per attempt (default %(default)s)")
    p.add_argument("--backoff", type=positive_float, default=0.5,
                   help="seconds before the 2nd attempt, doubling each time (default %(default)s)")
    p.add_argument("--max-backoff", type=positive_float, default=30.0, help="longest wait (default %(default)s)")
    p.add_argument("--from-beginning", action="store_true",
                   help="a group without committed offsets starts at the oldest record, not the newest")
    p.add_argument("-X", "--consumer-config", action="append", default=[], type=name_value, metavar="NAME=VALUE",
                   help="a librdkafka consumer property, e.g. session.timeout.ms=6000 (repeatable)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    add_connection_args(p)
    p.set_defaults(func=run, waits_for_broker=True)


def run(args) -> int:
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    secret = os.environ.get("HEADWATER_PUSH_SECRET")  # from the environment: never on a command line
    config = PushConfig(bootstrap=args.bootstrap_server, topic=args.topic, group=args.group or f"push-{args.topic}",
                        endpoint=args.endpoint, dead_letter_topic=args.dead_letter_topic or f"{args.topic}.dlq",
                        secret=secret.encode() if secret else None, max_attempts=args.max_attempts,
                        max_in_flight=args.max_in_flight, ordering=args.ordering, batch_size=args.batch_size,
                        batch_wait=args.batch_wait, batch_attempts=args.batch_attempts, timeout=args.timeout,
                        backoff=Backoff(args.backoff, args.max_backoff), from_beginning=args.from_beginning,
                        consumer_config=dict(args.consumer_config), security=args.command_config)
    stopping = StopRequest()
    asyncio.run(PushSubscription(config).run(should_stop=stopping))
    return stopping.exit_status()
