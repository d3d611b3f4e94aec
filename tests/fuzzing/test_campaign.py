"""The bounded fuzzing campaign `make test` runs (issue 10): 20,000 mutated frames of every
advertised API and version at a real broker over 16 connections. It fails on any internal
error or traceback in the broker's log, a crash, a hang (no ApiVersions answer within 10 s
after a batch of 1,000 frames), a changed byte of the canary topic, a record the real clients
lost, or memory growth past 64 MB. Longer campaigns: bench/fuzz.py."""
import asyncio
import os

from headwater.broker.apis import ADVERTISED
from headwater.fuzzing.campaign import Campaign

FRAMES = 20_000
SEED = int(os.environ.get("FUZZ_SEED", "20261123"))
RSS_GROWTH_BOUND = 64 << 20


def test_campaign(start_broker):
    broker = start_broker()
    print(f"fuzz seed {SEED} (set FUZZ_SEED to replay another)")
    report = asyncio.run(Campaign(broker, ADVERTISED, SEED).run(FRAMES))
    findings = "\n".join(f"{f.mutation} of {f.seed}: {f.frame_hex}" for f in report.findings)
    assert report.frames == FRAMES
    assert not report.crashed and not report.hung, f"broker {'crashed' if report.crashed else 'hung'}"
    assert (report.tracebacks, report.internal_errors) == (0, 0), f"see {broker.log_file}; frames:\n{findings}"
    assert report.canary_intact and report.canary_matches_ground_truth
    assert report.round_trip_delivered > 0 and report.round_trip_lost == 0 and report.round_trip_in_order, \
        report.round_trip_errors
    assert report.rss_after - report.rss_before < RSS_GROWTH_BOUND, (report.rss_before, report.rss_after)
    assert report.answered > FRAMES // 10 and report.closed_by_broker > FRAMES // 10  # both paths exercised
