"""`headwater pipelines`: list the shipped pipelines, or run some on Spark, locally or on a cluster."""
from __future__ import annotations

import argparse
import functools
import socket
import sys
import time
from pathlib import Path

from headwater.cli.common import CommandError, add_connection_args, client_config, emit, name_value
from headwater.cli.long_running import StopRequest, command_log
from headwater.waiting import PROBE_TIMEOUT, Stopped, client_log, wait_for_broker

MASTER_TIMEOUT_S = 5.0
LIVE_TRIGGER = "1 second"


def trigger(text: str) -> dict:
    """--trigger as DataStreamWriter.trigger's keyword arguments."""
    if text == "available-now":
        return {"availableNow": True}
    if text == "once":
        return {"once": True}
    if text and text[0].isdigit():
        return {"processingTime": text}
    raise argparse.ArgumentTypeError(f"expected available-now, once or an interval such as '10 seconds', got {text!r}")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("pipelines", help="run the shipped Spark pipelines (locally or on a cluster)")
    sub = p.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="the shipped pipelines and their parameters")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    listing.set_defaults(func=list_pipelines)

    run = sub.add_parser("run", help="run pipelines from their topics into their sinks",
                         description="Run the named pipelines together until interrupted (one after another to the "
                         "end of their topics with --trigger available-now or once) on the Spark master given, "
                         "reading the broker's topics. A line per micro-batch on stderr says what each did; input "
                         "records that are not the JSON a pipeline expects go to its dead-letter topic.")
    run.add_argument("names", nargs="+", metavar="NAME", help="pipelines to run (see `headwater pipelines list`)")
    run.add_argument("--master", default="local[2]",
                     help="Spark master URL: local[N] or spark://HOST:PORT (default %(default)s)")
    add_connection_args(run)
    run.add_argument("--checkpoint", type=Path, help="checkpoint directory; a rerun continues where the last "
                     "run stopped (default: OUTPUT/checkpoints)")
    run.add_argument("--output", type=Path, default=Path("headwater-output"),
                     help="directory of the SQLite and Parquet sinks (default %(default)s)")
    run.add_argument("--trigger", type=trigger, default=trigger(LIVE_TRIGGER),
                     help=f"an interval such as '10 seconds': a micro-batch that often, with what arrived, until "
                     f"interrupted (default: {LIVE_TRIGGER}); available-now: everything in the topics, then stop; once")
    run.add_argument("--source", choices=("headwater", "kafka"), default="headwater",
                     help="the streaming source the pipelines read with: Headwater's own (default), or Spark's "
                     "Kafka connector, whose jars must be on spark.jars (--conf spark.jars=... or "
                     "spark.jars.packages=org.apache.spark:spark-sql-kafka-0-10_2.13:VERSION)")
    run.add_argument("--set", type=name_value, action="append", default=[], dest="params", metavar="NAME=VALUE",
                     help="a pipeline parameter (topic names, lateness, ...: see `headwater pipelines list`)")
    run.add_argument("--conf", type=name_value, action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark configuration setting, e.g. spark.executor.memory=1g")
    run.set_defaults(func=run_pipelines, waits_for_broker=True)


def list_pipelines(args) -> int:
    from headwater.pipelines.catalog import PIPELINES

    emit(args, [{"name": p.name, "what": p.summary, "parameters": [f"{k}={v}" for k, v in p.params.items()]}
                for p in PIPELINES.values()], title="shipped pipelines")
    return 0


def check_master(master: str) -> None:
    """Refuse at once a spark:// master nobody listens at (Spark itself retries for a minute)."""
    if not master.startswith("spark://"):
        if not master.startswith("local"):
            raise CommandError(f"unsupported --master {master!r}: use local[N] or spark://HOST:PORT")
        return
    failures = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host, int(port)), MASTER_TIMEOUT_S).close()
            return
        except (OSError, ValueError) as exc:
            failures.append(f"{address}: {getattr(exc, 'strerror', None) or exc}")
    raise CommandError(f"cannot reach the Spark master {master} ({'; '.join(failures)})")


def _wait_for_broker(args, stopping: StopRequest) -> None:
    """Before Spark starts: a broker that is down is waited for (one line), not failed on."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(client_config(args, logger=client_log))  # a refused login still fails at once

    def reachable() -> None:
        admin.poll(0)  # serves the client's log lines
        admin.list_topics(timeout=PROBE_TIMEOUT)
    wait_for_broker(reachable, args.bootstrap_server, stopping, command_log("pipelines"))


def run_pipelines(args) -> int:
    from headwater.pipelines.catalog import PIPELINES

    unknown = [n for n in args.names if n not in PIPELINES]
    if unknown:
        raise CommandError(f"unknown pipeline {unknown[0]!r} (known: {', '.join(PIPELINES)})")
    chosen = [PIPELINES[n] for n in args.names]
    params = dict(args.params)
    known = {k for p in chosen for k in p.params}
    if set(params) - known:
        raise CommandError(f"unknown parameter {sorted(set(params) - known)[0]!r} for {', '.join(args.names)} "
                           f"(known: {', '.join(sorted(known))})")
    dead_letters = [{**p.params, **params}["dead-letter"] for p in chosen]
    if len(set(dead_letters)) < len(dead_letters):
        raise CommandError("pipelines run together need dead-letter topics of their own: "
                           "leave --set dead-letter=... to its default")
    check_master(args.master)
    stopping = StopRequest()
    try:
        _wait_for_broker(args, stopping)
    except Stopped:
        return stopping.exit_status()

    from pyspark.errors import StreamingQueryException

    import headwater.spark
    from headwater.pipelines.catalog import Run
    from headwater.pipelines.progress import follow

    args.output.mkdir(parents=True, exist_ok=True)
    spark = headwater.spark.session(args.master, app_name=f"headwater-pipelines {' '.join(args.names)}",
                                    conf=dict(args.conf))
    spark.sparkContext.setLogLevel("WARN")
    client = {"bootstrap.servers": args.bootstrap_server, **args.command_config}
    runs = [(p, Run(spark, client, args.checkpoint or args.output / "checkpoints", args.output, args.trigger,
                    {**p.params, **{k: v for k, v in params.items() if k in p.params}}, args.source))
            for p in chosen]
    show = functools.partial(print, file=sys.stderr, flush=True)
    try:
        if "processingTime" in args.trigger:  # run until interrupted: all at once
            follow([pipeline.start(run) for pipeline, run in runs], show, stopping)
            return stopping.exit_status()
        for pipeline, run in runs:  # one after another (transformWithState queries are better alone)
            started = time.monotonic()
            query = pipeline.start(run)
            if not follow([query], show, stopping):
                return stopping.exit_status()
            batches = query.lastProgress["batchId"] + 1 if query.lastProgress else 0
            print(f"{pipeline.name}: {batches} micro-batches in {time.monotonic() - started:.1f} s", flush=True)
    except StreamingQueryException as exc:
        raise CommandError(f"a pipeline failed (rerun to continue from its checkpoint): "
                           f"{str(exc).strip().splitlines()[0]}") from None
    finally:
        spark.stop()
    return 0
