"""Processors that see each key's events in event-time order (transformWithState)."""

import random

from tests.support.sparkdata import BASE_MS, MINUTE, file_stream, run_to_end, ts, user_events, write_batches

from headwater.pipelines import cep, lateness, reference, sliding

LATENESS_MS = 5 * MINUTE


def test_sliding_window_per_event(spark, tmp_path):
    batches = user_events(seed=4, batches=6)
    kept, dropped, final_wm = reference.admitted(batches, LATENESS_MS)
    size = 2 * MINUTE
    expected = {
        e["event_id"]: sum(1 for o in kept if o["user_id"] == e["user_id"] and e["ts_ms"] - size < o["ts_ms"] <= e["ts_ms"])
        for e in kept if e["ts_ms"] <= final_wm
    }

    events = file_stream(spark, write_batches(tmp_path / "in", batches), "event_id string, user_id string, ts_ms long")
    out = sliding.sliding_counts(lateness.on_time(events, "event_time", "5 minutes"), "event_time", size, "user_id")
    rows, query = run_to_end(out, tmp_path / "ck")

    assert {r.event_id: r.events_in_window for r in rows} == expected
    assert max(expected.values()) >= 3
    assert lateness.dropped_events(query) == dropped > 0


def payments(seed: int):
    """Payments on a few cards: bursts of failures, some followed by a success within
    10 minutes, some too slow; delivered out of order within a minute."""
    rng = random.Random(seed)
    events, n = [], 0
    for card in ("c1", "c2", "c3", "c4"):
        clock = BASE_MS + rng.randint(0, MINUTE)
        for _ in range(6):
            clock += rng.randint(2, 20) * MINUTE
            for _ in range(rng.randint(1, 5)):
                clock += rng.randint(10_000, 150_000)
                n += 1
                events.append({"event_id": f"p{n}", "card_id": card, "ts_ms": clock, "status": "failed"})
            if rng.random() < 0.8:
                clock += rng.randint(10_000, 240_000)
                n += 1
                events.append({"event_id": f"p{n}", "card_id": card, "ts_ms": clock, "status": "succeeded"})
    events.sort(key=lambda e: e["ts_ms"] + rng.randint(0, MINUTE))  # arrival order
    return reference.micro_batches(events, 15)


def expected_matches(kept, final_wm):
    found = set()
    for card in {e["card_id"] for e in kept}:
        failed = []
        for e in sorted((e for e in kept if e["card_id"] == card), key=lambda e: (e["ts_ms"], e["event_id"])):
            if e["ts_ms"] > final_wm:
                break
            recent = [t for t in failed if t >= e["ts_ms"] - 10 * MINUTE]
            if e["status"] == "failed":
                failed = recent + [e["ts_ms"]]
                continue
            if len(recent) >= 3:
                found.add((card, recent[0], e["ts_ms"], len(recent)))
            failed = []
    return found


def test_three_failures_then_success_within_ten_minutes(spark, tmp_path):
    batches = payments(seed=5)
    kept, dropped, final_wm = reference.admitted(batches, LATENESS_MS)
    expected = expected_matches(kept, final_wm)

    events = file_stream(spark, write_batches(tmp_path / "in", batches),
                         "event_id string, card_id string, ts_ms long, status string")
    on_time = lateness.on_time(events.withColumnRenamed("event_id", "payment_id"), "event_time", "5 minutes",
                               id_cols=["payment_id"])
    rows, query = run_to_end(cep.failures_then_success(on_time), tmp_path / "ck")

    assert len(expected) >= 3
    assert sorted((r.card_id, r.first_failure, r.success_time, r.failures) for r in rows) == \
        sorted((c, ts(f), ts(s), n) for c, f, s, n in expected)
    assert lateness.dropped_events(query) == dropped
