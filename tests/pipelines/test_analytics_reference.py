"""The plain-Python yardsticks of the analytics and clocks pipelines, step by step on
inputs small enough to work out by hand."""
from headwater.pipelines import reference

SKEW = 5_000  # the device's clock runs 5 s ahead


def reading(true_ms: int, sent_true_ms: int, delay_ms: int = 100) -> dict:
    return {"device_id": "d", "event_ms": true_ms + SKEW, "sent_ms": sent_true_ms + SKEW,
            "received_ms": sent_true_ms + delay_ms}


def test_a_straggler_publishes_a_correction_then_a_later_one_is_too_late():
    batches = [
        [reading(1_000, 1_000), reading(2_000, 2_000, delay_ms=300)],  # window 0; offset = min(100, 300) - skew
        [reading(65_000, 65_000)],  # moves the watermark to 65.1 s: window 0 (ends at 60 s) is due
        [reading(70_000, 70_000)],  # window 0 published, with 2 events
        [reading(30_000, 75_000)],  # sent 45 s late, window 0 ended 10 s before the watermark: a correction
        [reading(250_000, 250_000)],
        [reading(40_000, 251_000)],  # window 0 ended 190 s before the watermark (> lateness 120 s): too late
    ]
    rows = reference.corrected_windows(batches, size=60_000, lateness=120_000, delay=0)
    offset = 100 - SKEW
    assert rows == [("d", 0, "result", 2, 0, offset), ("d", 0, "correction", 3, 1, offset),
                    ("d", 0, "too-late", 1, None, offset), ("d", 60_000, "result", 2, 0, offset)]


def test_rank_error_bound_of_a_percentile():
    values = list(range(1, 201))  # n = 200; p95's exact rank is 190
    assert reference.percentile_rank(200, 0.95) == 190
    assert reference.within_rank_error(values, 192, 0.95, accuracy=100)  # 2 ranks off: within 200/100
    assert not reference.within_rank_error(values, 193, 0.95, accuracy=100)
    assert reference.within_rank_error(values, 193, 0.95, accuracy=100, summaries=2)  # two merged summaries: 4
    assert not reference.within_rank_error(values, 190.5, 0.95, accuracy=100)  # not one of the values


def test_top_keys_break_ties_by_key():
    kept = [{"ts_ms": t, "page": p} for t, p in [(1, "/b"), (2, "/a"), (3, "/c"), (4, "/c"), (61_000, "/a")]]
    assert reference.top_keys(kept, 60_000, 60_000, "page", 2) == {0: [("/c", 2), ("/a", 1)]}
