"""Stream analytics (rates, rolling averages, percentiles, distinct counts, top-k) and the
three clocks (skew correction, corrections for stragglers), run as the shipped pipelines
from a real broker's topics, each answer held to `reference` and to its stated bound."""
from __future__ import annotations

import json

import pytest
from tests.support.sparkdata import create_topic, produce, read_back

from headwater.demo.spark_chapter import run_pipeline, sqlite_rows
from headwater.demo.analytics_events import MAX_DELAY_MS, SKEWS_MS, device_readings, page_views
from headwater.demo.shop_events import MINUTE
from headwater.pipelines import analytics, reference
from headwater.pipelines.catalog import PIPELINES

VIEWS_PER_BATCH = 500
PER_TRIGGER = {"per-trigger": str(VIEWS_PER_BATCH)}


def with_bad_records(events: list[dict], wrong_type: dict) -> list:
    """The events with a record that is not JSON and one with a field of the wrong type
    among them (as bytes: values the pipeline must set aside, counted)."""
    bad = [b"{not json", json.dumps({**events[0], **wrong_type}).encode()]
    return events[:100] + bad[:1] + events[100:200] + bad[1:] + events[200:]


def good_batches(records: list, per_trigger: int) -> list[list[dict]]:
    """The micro-batches the query reads (bad records take their offsets too), without the bad records."""
    return [[r for r in chunk if isinstance(r, dict)] for chunk in reference.micro_batches(records, per_trigger)]


def value(record) -> bytes:
    return record if isinstance(record, bytes) else json.dumps(record).encode()


@pytest.fixture
def views(broker):
    records = with_bad_records(page_views(seed=11), {"latency_ms": "slow"})
    create_topic(broker.bootstrap, "page-views", 1)
    produce(broker.bootstrap, "page-views", [(None, value(r), None, None, None) for r in records])
    batches = good_batches(records, VIEWS_PER_BATCH)
    kept, dropped, watermark = reference.admitted(batches, 2 * MINUTE)
    assert dropped > 0
    return kept, watermark, reference.batch_of(batches)


def assert_set_aside(bootstrap: str, pipeline: str, records: list) -> None:
    """The bad records, and only they, are in the pipeline's dead-letter topic, as they were."""
    letters = sorted(v for _, v in read_back(bootstrap, PIPELINES[pipeline].params["dead-letter"]).values())
    assert letters == sorted(r for r in records if isinstance(r, bytes))


@pytest.mark.parametrize("slide", ["1 minute", "30 seconds"])  # tumbling, and a rolling 1-minute window
def test_rates_percentiles_and_distinct_users_within_their_bounds(spark, broker, views, tmp_path, slide):
    kept, watermark, batch_of = views
    run_pipeline(spark, broker.bootstrap, tmp_path, "latency-stats", slide=slide, **PER_TRIGGER)
    got = {r[0]: r[1:] for r in sqlite_rows(tmp_path / "latency_stats.db", "SELECT start_ms, events, per_second, "
                                            "mean, p50, p95, p99, distinct_users FROM latency_stats")}
    slide_ms = MINUTE if slide == "1 minute" else MINUTE // 2
    expected = reference.window_stats(kept, watermark, MINUTE, slide_ms, "latency_ms", "user_id", batch_of)

    assert set(got) == set(expected) and len(got) >= 5
    for start, (events, per_second, mean, *percentiles, distinct) in got.items():
        want = expected[start]
        assert (events, per_second) == (want["events"], want["per_second"])
        assert mean == pytest.approx(want["mean"], rel=1e-12)  # summed in another order
        for p, found in zip(analytics.PERCENTILES, percentiles):
            assert reference.within_rank_error(want["sorted"], found, p, analytics.ACCURACY, want["summaries"]), \
                (start, p, found)
        assert abs(distinct - want["distinct_keys"]) <= 3 * analytics.RSD * want["distinct_keys"]
    assert_set_aside(broker.bootstrap, "latency-stats", with_bad_records(page_views(seed=11), {"latency_ms": "slow"}))


def test_top_pages_per_window_are_exact(spark, broker, views, tmp_path):
    kept, watermark, _ = views
    run_pipeline(spark, broker.bootstrap, tmp_path, "top-pages", k="3", **PER_TRIGGER)
    got = {}
    for start, rank, page, events in sqlite_rows(tmp_path / "top_pages.db",
                                          "SELECT start_ms, rank, page, events FROM top_pages ORDER BY start_ms, rank"):
        got.setdefault(start, []).append((page, events))
    expected = reference.top_keys(kept, watermark, MINUTE, "page", 3)
    assert got == expected and len(got) >= 5


def test_device_clocks_are_corrected_and_stragglers_publish_corrections(spark, broker, tmp_path):
    readings = with_bad_records(device_readings(seed=12), {"event_ms": "soon"})
    create_topic(broker.bootstrap, "device-readings", 1)
    produce(broker.bootstrap, "device-readings", [  # the record timestamp is the broker's receive time
        (None, value({k: v for k, v in r.items() if k not in ("received_ms", "true_ms")}) if isinstance(r, dict)
         else r, None, None, r["received_ms"] if isinstance(r, dict) else None) for r in readings])
    per_trigger = 25  # 12 micro-batches of the 286 records: stragglers still land late (6 corrections, 11 too late)
    run_pipeline(spark, broker.bootstrap, tmp_path, "device-clocks", **{"per-trigger": str(per_trigger)})
    found = spark.read.parquet(str(tmp_path / "device_windows")).collect()
    got = sorted((r.device_id, r.start_ms, r.kind, r.events, r.revision, r.offset_ms) for r in found)

    expected = reference.corrected_windows(good_batches(readings, per_trigger), MINUTE, 3 * MINUTE, 10_000)
    assert got == sorted(expected)
    kinds = {kind for _, _, kind, *_ in got}
    assert kinds == {"result", "correction", "too-late"}
    # The offset estimate is off the true skew by at most one network delay.
    for device, _, _, _, _, offset in got:
        assert 0 <= offset + SKEWS_MS[device] <= MAX_DELAY_MS
    assert_set_aside(broker.bootstrap, "device-clocks", readings)
