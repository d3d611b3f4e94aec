"""A fuzzing campaign of any length against a real broker, by hand: the long run of what
tests/fuzzing/test_campaign.py runs briefly in `make test`.

    .venv/bin/python bench/fuzz.py [--frames 200000] [--seed N] [--connections 16] [--smoke]

Valid requests for every advertised API and version, mutated (bit flips, truncations, length
lies, extreme counts and integers, nulls where the schema forbids them, random API keys and
versions, hostile record batches), go to one broker over many connections, while a canary
topic waits to be checked byte for byte and confluent-kafka clients round-trip records.
Prints a table of figures and, for each internal error, the mutation and the frame as hex.
Exits non-zero if the campaign was not clean. There is no peer: a Kafka (JVM) broker cannot
be installed here to take the same frames.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

from rich.console import Console

from headwater.broker.apis import ADVERTISED
from headwater.fuzzing.campaign import Campaign, CampaignReport
from headwater.fuzzing.corpus import HOSTILE_TOPIC, TOPIC
from headwater.testing import BrokerProcess
from tables import table  # bench/tables.py


def figures(report: CampaignReport) -> list[dict]:
    mb = 1 << 20
    rows = [
        ("frames sent", f"{report.frames:,}"),
        ("frames per second (setup included)", f"{report.frames / report.seconds:,.0f}"),
        ("answered", f"{report.answered:,}"),
        ("connection closed by the broker", f"{report.closed_by_broker:,}"),
        ("no answer (long size prefix, long poll, acks=0)", f"{report.unanswered:,}"),
        ("liveness checks passed", f"{report.liveness_checks - (report.hung or report.crashed):,}"),
        ("crashed / hung", f"{report.crashed} / {report.hung}"),
        ("tracebacks / internal errors in the log", f"{report.tracebacks} / {report.internal_errors}"),
        ("canary bytes unchanged / as produced", f"{report.canary_intact} / {report.canary_matches_ground_truth}"),
        ("round-trip records delivered / lost", f"{report.round_trip_delivered:,} / {report.round_trip_lost}"),
        ("round-trip order kept", str(report.round_trip_in_order)),
        ("broker RSS before / after", f"{report.rss_before / mb:.0f} MB / {report.rss_after / mb:.0f} MB"),
        ("seconds", f"{report.seconds:.1f}"),
    ]
    rows += [(f"  mutation: {name}", f"{count:,}") for name, count in report.mutations.most_common()]
    return [{"figure": name, "value": value} for name, value in rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=200_000, help="mutated frames to send")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    parser.add_argument("--connections", type=int, default=16, help="concurrent client connections")
    parser.add_argument("--smoke", action="store_true", help="a few seconds: 1,000 frames")
    parser.add_argument("--hostile-into-read-topic", action="store_true",
                        help=f"produce hostile batches to {TOPIC!r}, which the corpus reads (and ListOffsets by time), "
                             f"instead of {HOSTILE_TOPIC!r} (issue 10 finding 6)")
    args = parser.parse_args()
    frames = 1_000 if args.smoke else args.frames
    seed = random.randrange(1 << 32) if args.seed is None else args.seed
    console = Console()
    console.print(f"fuzzing with seed {seed}: {frames:,} frames over {args.connections} connections")
    with tempfile.TemporaryDirectory(prefix="headwater-fuzz-") as tmp:
        log_file = Path(tmp).with_suffix(".broker.log")  # outlives the data, kept when there are findings
        with BrokerProcess(Path(tmp) / "data", log_file=log_file) as broker:
            campaign = Campaign(broker, ADVERTISED, seed, connections=args.connections,
                                hostile_topic=TOPIC if args.hostile_into_read_topic else HOSTILE_TOPIC)
            report = asyncio.run(campaign.run(frames))
    console.print(table(f"Headwater under fuzzing (seed {report.seed})", figures(report)))
    for finding in report.findings:
        console.print(f"{finding.what}: {finding.mutation} of {finding.seed}: {finding.frame_hex}", soft_wrap=True)
    if report.clean:
        log_file.unlink()
        return 0
    console.print(f"broker log: {log_file}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
