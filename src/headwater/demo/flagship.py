"""The flagship scenario `make demo` runs: a shop's events through every part of Headwater.

A broker starts on a temporary data directory (the embedded default) with its web console
and /metrics on (the address is printed first: watch the topics and groups fill while the
chapters run), each chapter runs against it, and everything is shut down cleanly at the end,
or when you press Ctrl-C with --keep-running. With $HEADWATER_DEMO_BOOTSTRAP set (HOST:PORT,...)
no broker starts: the chapters run against that cluster (a Kafka cluster, say), except those
that need Headwater's own broker.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
from pathlib import Path

from rich.console import Console

from headwater.demo import (analytics, cdc_shop, compaction, derived_systems, groups, messaging, orders, payments,
                            schemas, share_queue, shopping_cart, stream_processing)
from headwater.demo.checks import CheckFailed
from headwater.demo.spark_chapter import start_session
from headwater.testing import BrokerProcess

# each: run(bootstrap, console), and a SparkSession too for SPARK_CHAPTERS
CHAPTERS = [orders, groups, share_queue, messaging, cdc_shop, derived_systems, compaction, payments, shopping_cart,
            stream_processing, analytics, schemas]
SPARK_CHAPTERS = {derived_systems, stream_processing, analytics}  # on one SparkSession: a JVM starts in ~10 s
EXTERNAL_BOOTSTRAP = "HEADWATER_DEMO_BOOTSTRAP"
# StatsD over UDP into a topic, and the schema registry: listeners of Headwater's broker
EMBEDDED_ONLY = [messaging, schemas]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m headwater.demo", description="Headwater's flagship demo")
    parser.add_argument("--keep-running", action="store_true",
                        help="keep the broker and its web console up after the chapters, until Ctrl-C")
    args = parser.parse_args(argv)
    console = Console()
    external = os.environ.get(EXTERNAL_BOOTSTRAP)
    if external:
        console.print(f"[bold green]chapters against {external}[/] (${EXTERNAL_BOOTSTRAP}); skipped, as they need "
                      f"Headwater's own broker: {', '.join(c.__name__.rsplit('.', 1)[1] for c in EMBEDDED_ONLY)}")
    with tempfile.TemporaryDirectory(prefix="headwater-demo-") as tmp:
        if external:
            return _chapters(console, external, [c for c in CHAPTERS if c not in EMBEDDED_ONLY], Path(tmp))
        with BrokerProcess(Path(tmp) / "data", "--num-partitions", "3", "--cleaner-interval-ms", "500",
                           "--http-listener", "127.0.0.1:0", "--console-allow-writes",
                           *messaging.broker_flags()) as broker:
            console.print(f"[bold green]headwater broker[/] on {broker.bootstrap}, data in {broker.data_dir}")
            console.print(f"[bold green]web console[/] at {broker.console_url} (Prometheus metrics at "
                          f"{broker.console_url}metrics)")
            if _chapters(console, broker.bootstrap, CHAPTERS, Path(tmp), broker.console_url):
                return 1
            if args.keep_running:
                _explore(console, broker.console_url)
        console.print(f"broker stopped cleanly (exit status {broker.proc.returncode})")
    return 0


def _chapters(console: Console, bootstrap: str, chapters: list, tmp: Path, registry_url: str | None = None) -> int:
    """Run `chapters` against `bootstrap` (the schema registry at `registry_url`): 0, or 1 once a chapter's
    check fails."""
    spark = None
    try:
        for chapter in chapters:
            if chapter in SPARK_CHAPTERS:
                spark = spark or start_session(console, tmp / "spark.log")
                chapter.run(bootstrap, console, spark)
            elif chapter is schemas:
                chapter.run(bootstrap, console, registry_url)
            else:
                chapter.run(bootstrap, console)
    except CheckFailed as failed:
        console.print(f"[bold red]the demo's check failed:[/] {failed}")
        return 1
    finally:
        if spark is not None:
            spark.stop()
    return 0


def _explore(console: Console, url: str) -> None:
    console.print(f"[bold]the demo is done; explore its topics and groups at {url}[/] (Ctrl-C to stop)")
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        console.print("stopping")


if __name__ == "__main__":
    sys.exit(main())
