"""The flagship scenario `make demo` runs: a shop's events through every part of Headwater.

A broker starts on a temporary data directory (the embedded default), each chapter runs
against it, and everything is shut down cleanly at the end.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from rich.console import Console

from headwater.demo import cdc_shop, compaction, groups, orders, payments, shopping_cart, stream_processing
from headwater.demo.checks import CheckFailed
from headwater.testing import BrokerProcess

CHAPTERS = [orders, groups, cdc_shop, compaction, payments, shopping_cart, stream_processing]  # each: run(bootstrap, console)


def main() -> int:
    console = Console()
    with tempfile.TemporaryDirectory(prefix="headwater-demo-") as tmp:
        with BrokerProcess(Path(tmp) / "data", "--num-partitions", "3", "--cleaner-interval-ms", "500") as broker:
            console.print(f"[bold green]headwater broker[/] on {broker.bootstrap}, data in {broker.data_dir}")
            try:
                for chapter in CHAPTERS:
                    chapter.run(broker.bootstrap, console)
            except CheckFailed as failed:
                console.print(f"[bold red]the demo's check failed:[/] {failed}")
                return 1
        console.print(f"broker stopped cleanly (exit status {broker.proc.returncode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
