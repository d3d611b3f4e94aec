"""Stream-stream join: searches x clicks within 10 minutes, against plain Python."""

import random
from collections import defaultdict

from tests.support.sparkdata import BASE_MS, MINUTE, file_stream, run_to_end, write_batches

from headwater.pipelines import lateness, window_join


def sessions(seed: int, batches: int = 4):
    """Searches and clicks per session: some clicks within 10 minutes, some later
    (no match), some searches without clicks; each side out of order within a minute."""
    rng = random.Random(seed)
    searches, clicks = [], []
    clock = BASE_MS
    for n in range(36):
        clock += rng.randint(30_000, 150_000)
        session, term = f"s{n % 9}", rng.choice(["boots", "tent", "stove"])
        searches.append({"event_id": f"q{n}", "session_id": session, "term": term, "ts_ms": clock})
        for c in range(rng.choice([0, 0, 1, 1, 2])):
            delay = rng.choice([rng.randint(5_000, 9 * MINUTE), rng.randint(11 * MINUTE, 14 * MINUTE)])
            clicks.append({"event_id": f"c{n}-{c}", "session_id": session, "ts_ms": clock + delay})
    arrival = lambda events: sorted(events, key=lambda e: e["ts_ms"] + rng.randint(0, MINUTE))
    split = lambda events: [events[i * len(events) // batches:(i + 1) * len(events) // batches] for i in range(batches)]
    return split(arrival(searches)), split(arrival(clicks))


def test_click_through_rate_per_term(spark, tmp_path):
    search_batches, click_batches = sessions(seed=6)
    all_searches = [s for b in search_batches for s in b]
    all_clicks = [c for b in click_batches for c in b]
    expected_pairs = {(s["event_id"], c["event_id"]) for s in all_searches for c in all_clicks
                      if c["session_id"] == s["session_id"] and s["ts_ms"] <= c["ts_ms"] <= s["ts_ms"] + 10 * MINUTE}
    clicked = {q for q, _ in expected_pairs}
    # The last searches are still open when the input ends (the watermark has not
    # passed them + 10 minutes); only those older are emitted as non-clicks.
    # The watermark of a query with two inputs is the smaller of the two.
    final_wm = min(max(e["ts_ms"] for e in all_searches), max(e["ts_ms"] for e in all_clicks)) - 5 * MINUTE
    expected_misses = {s["event_id"] for s in all_searches
                       if s["event_id"] not in clicked and s["ts_ms"] + 10 * MINUTE < final_wm}

    searches = file_stream(spark, write_batches(tmp_path / "s", search_batches),
                           "event_id string, session_id string, term string, ts_ms long")
    clicks = file_stream(spark, write_batches(tmp_path / "c", click_batches),
                         "event_id string, session_id string, ts_ms long")
    outcomes = window_join.search_outcomes(
        lateness.on_time(searches.withColumnRenamed("event_id", "search_id"), "event_time", "5 minutes", ["search_id"]),
        lateness.on_time(clicks.withColumnRenamed("event_id", "click_id"), "event_time", "5 minutes", ["click_id"]))
    rows, _ = run_to_end(outcomes, tmp_path / "ck")

    assert {(r.search_id, r.click_id) for r in rows if r.clicked} == expected_pairs
    assert {r.search_id for r in rows if not r.clicked} == expected_misses
    assert len(expected_pairs) > 5 and len(expected_misses) > 5

    ctr = {r.term: (r.searches, r.clicked_searches) for r in
           window_join.click_through_rates(spark.createDataFrame(rows)).collect()}
    truth = defaultdict(lambda: [0, 0])
    for s in all_searches:
        if s["event_id"] in clicked or s["event_id"] in expected_misses:
            truth[s["term"]][0] += 1
            truth[s["term"]][1] += s["event_id"] in clicked
    assert ctr == {t: tuple(v) for t, v in truth.items()}
