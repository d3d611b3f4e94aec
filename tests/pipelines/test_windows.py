"""Windows on event time with a watermark, against a plain-Python model of the same."""

from collections import Counter

from tests.support.sparkdata import MINUTE, file_stream, run_to_end, ts, user_events, write_batches

from headwater.pipelines import lateness, reference, windows

SCHEMA = "event_id string, user_id string, ts_ms long"
LATENESS_MS = 5 * MINUTE


def _stream(spark, tmp_path, batches):
    events = file_stream(spark, write_batches(tmp_path / "in", batches), SCHEMA)
    return lateness.on_time(events, "event_time", "5 minutes")


def test_tumbling_windows_count_late_events_and_drop_too_late_ones(spark, tmp_path):
    batches = user_events(seed=1)
    kept, dropped, final_wm = reference.admitted(batches, LATENESS_MS)
    size = 2 * MINUTE
    expected = Counter((e["ts_ms"] // size * size, e["user_id"]) for e in kept)
    expected = {k: n for k, n in expected.items() if k[0] + size <= final_wm}

    out = windows.tumbling_counts(_stream(spark, tmp_path, batches), "event_time", "2 minutes", ["user_id"])
    rows, query = run_to_end(out, tmp_path / "ck")

    assert {(r.window_start, r.user_id): r.events for r in rows} == {(ts(s), u): n for (s, u), n in expected.items()}
    assert dropped > 0 and any(e["ts_ms"] < max(x["ts_ms"] for x in kept) - MINUTE for e in kept)
    assert lateness.dropped_events(query) == dropped


def test_hopping_windows(spark, tmp_path):
    batches = user_events(seed=2)
    kept, dropped, final_wm = reference.admitted(batches, LATENESS_MS)
    size, slide = 4 * MINUTE, MINUTE
    expected = Counter()
    for e in kept:
        start = e["ts_ms"] // slide * slide
        for s in range(start - size + slide, start + 1, slide):
            expected[(s, e["user_id"])] += 1
    expected = {k: n for k, n in expected.items() if k[0] + size <= final_wm}

    out = windows.hopping_counts(_stream(spark, tmp_path, batches), "event_time", "4 minutes", "1 minute", ["user_id"])
    rows, query = run_to_end(out, tmp_path / "ck")

    assert {(r.window_start, r.user_id): r.events for r in rows} == {(ts(s), u): n for (s, u), n in expected.items()}
    assert lateness.dropped_events(query) == dropped > 0


def test_session_windows_per_user(spark, tmp_path):
    batches = user_events(seed=3)
    kept, dropped, final_wm = reference.admitted(batches, LATENESS_MS)
    gap = MINUTE
    expected = {}
    for user in {e["user_id"] for e in kept}:
        times = sorted(e["ts_ms"] for e in kept if e["user_id"] == user)
        start, last, n = times[0], times[0], 1
        for t in times[1:] + [None]:
            if t is not None and t < last + gap:
                last, n = t, n + 1
                continue
            if last + gap <= final_wm:
                expected[(user, start)] = (last + gap, n)
            if t is not None:
                start, last, n = t, t, 1

    out = windows.session_counts(_stream(spark, tmp_path, batches), "event_time", "1 minute", ["user_id"])
    rows, query = run_to_end(out, tmp_path / "ck")

    assert len(expected) > 5
    assert {(r.user_id, r.window_start): (r.window_end, r.events) for r in rows} == \
        {(u, ts(s)): (ts(e), n) for (u, s), (e, n) in expected.items()}
    assert lateness.dropped_events(query) == dropped
