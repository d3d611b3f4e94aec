"""Chapter: stream analytics, search on streams and the three clocks, on Spark. A site's
page views and sensor readings (`analytics_events`) go into Headwater topics and through
the shipped pipelines (`headwater.pipelines.catalog`, as `headwater pipelines run` starts
them): rolling rates, latency percentiles and distinct users, the top pages, standing
searches matched against new products (the percolator, `search`), and windows of
clock-corrected event time with corrections for stragglers. Each answer is checked as
it comes: exact ones against plain Python (`headwater.pipelines.reference`),
approximate ones against the bound their algorithm states. A miss raises `CheckFailed`.
"""
from __future__ import annotations

import json
import time
from collections import Counter

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from headwater.demo.analytics_events import MAX_DELAY_MS, SKEWS_MS, device_readings, page_views
from headwater.demo import search
from headwater.demo.checks import CheckFailed
from headwater.demo.shop_events import MINUTE
from headwater.demo.spark_chapter import clock, report_table, run_pipeline, sqlite_rows, workspace
from headwater.pipelines import analytics, reference

VIEWS_PER_BATCH, READINGS_PER_BATCH = 500, 40  # fixed micro-batches, so the same answers every run
LATENESS_MS = 2 * MINUTE  # the pipelines' default lateness ("2 minutes")


def _produce(bootstrap: str, views: list, readings: list) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 1) for t in ("page-views", "device-readings")]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for v in views:
        producer.produce("page-views", json.dumps(v), v["event_id"], timestamp=v["ts_ms"])
    for r in readings:  # the record timestamp is the broker's receive time; the truth stays here
        device_side = {k: r[k] for k in ("event_id", "device_id", "event_ms", "sent_ms")}
        producer.produce("device-readings", json.dumps(device_side), r["device_id"], timestamp=r["received_ms"])
    if producer.flush(30):
        raise RuntimeError("the analytics chapter's events were not acknowledged")


def rolling_stats(spark, bootstrap, workdir, console, views: list) -> None:
    """1-minute windows every 30 seconds: rate, mean, p50/p95/p99, distinct users."""
    run_pipeline(spark, bootstrap, workdir, "latency-stats", slide="30 seconds",
                 **{"per-trigger": str(VIEWS_PER_BATCH)})
    got = sqlite_rows(workdir / "latency_stats.db", "SELECT start_ms, events, per_second, mean, p50, p95, p99, "
                "distinct_users FROM latency_stats ORDER BY start_ms")
    batches = reference.micro_batches(views, VIEWS_PER_BATCH)
    kept, _, watermark = reference.admitted(batches, LATENESS_MS)
    exact = reference.window_stats(kept, watermark, MINUTE, MINUTE // 2, "latency_ms", "user_id",
                                   reference.batch_of(batches))
    if {r[0] for r in got} != set(exact):
        raise CheckFailed(f"latency-stats: windows from Spark {sorted(r[0] for r in got)} differ from plain "
                          f"Python's {sorted(exact)}")
    table = report_table("page views per 1-minute window every 30 s (Spark; exact in brackets)", "window from",
                         "views/s", "mean ms", "p50 ms", "p95 ms", "p99 ms", "users", numbers=6)
    for start, events, per_second, mean, *percentiles, users in got:
        want = exact[start]
        ranks = [reference.within_rank_error(want["sorted"], found, p, analytics.ACCURACY, want["summaries"])
                 for p, found in zip(analytics.PERCENTILES, percentiles)]
        if (events, per_second) != (want["events"], want["per_second"]) or abs(mean - want["mean"]) > 1e-9 * mean \
                or not all(ranks) or abs(users - want["distinct_keys"]) > 3 * analytics.RSD * want["distinct_keys"]:
            raise CheckFailed(f"latency-stats: the window from {clock(start, True)} is off: Spark {events}, "
                              f"{mean}, {percentiles}, {users} / Python {want['events']}, {want['mean']}, "
                              f"{want['distinct_keys']} (percentiles within bound: {ranks})")
        if events >= 100:  # the windows of a few far-too-late views that were admitted are left out of the table
            exact_p = [want["sorted"][reference.percentile_rank(events, p) - 1] for p in analytics.PERCENTILES]
            table.add_row(clock(start, True), f"{per_second:.2f}", f"{mean:.1f}",
                          *(f"{found:.1f} [{e:.1f}]" for found, e in zip(percentiles, exact_p)),
                          f"{users} [{want['distinct_keys']}]")
    console.print(table)
    console.print("the percentiles' bound is on rank, not on milliseconds: in the sparse tail (p99) a few ranks "
                  "can be tens of milliseconds")
    console.print(f"[green]✓[/] latency-stats: rates and rolling means equal plain Python's; each percentile's rank "
                  f"is within n/{analytics.ACCURACY} (percentile_approx's accuracy {analytics.ACCURACY}) per merged "
                  f"micro-batch summary of the exact one; distinct users (HyperLogLog++, rsd {analytics.RSD}) within "
                  f"3 x rsd of the exact count")


def top_pages(spark, bootstrap, workdir, console, views: list) -> None:
    """The three most viewed pages per minute, ranked exactly."""
    run_pipeline(spark, bootstrap, workdir, "top-pages", k="3", **{"per-trigger": str(VIEWS_PER_BATCH)})
    got = {}
    for start, page, events in sqlite_rows(workdir / "top_pages.db",
                                     "SELECT start_ms, page, events FROM top_pages ORDER BY start_ms, rank"):
        got.setdefault(start, []).append((page, events))
    kept, _, watermark = reference.admitted(reference.micro_batches(views, VIEWS_PER_BATCH), LATENESS_MS)
    expected = reference.top_keys(kept, watermark, MINUTE, "page", 3)
    if got != expected:
        wrong = [(clock(s), got.get(s), expected.get(s)) for s in set(got) | set(expected)
                 if got.get(s) != expected.get(s)]
        raise CheckFailed(f"top-pages: Spark's top pages differ from plain Python's (window, Spark, Python): "
                          f"{wrong[:3]}")
    table = report_table("top 3 pages per minute", "minute", "1st", "2nd", "3rd")
    for start, top in sorted(got.items()):
        if sum(n for _, n in top) >= 50:
            table.add_row(clock(start), *(f"{page} ({n})" for page, n in top))
    console.print(table)
    console.print("[green]✓[/] top-pages: Spark's ranking equals plain Python's")


def device_clocks(spark, bootstrap, workdir, console, readings: list) -> None:
    """Skewed device clocks corrected by the broker's; stragglers publish corrections or are counted."""
    run_pipeline(spark, bootstrap, workdir, "device-clocks", **{"per-trigger": str(READINGS_PER_BATCH)})
    got = sorted((r.device_id, r.start_ms, r.kind, r.events, r.revision, r.offset_ms)
                 for r in spark.read.parquet(str(workdir / "device_windows")).collect())
    expected = sorted(reference.corrected_windows(reference.micro_batches(readings, READINGS_PER_BATCH), MINUTE,
                                                  3 * MINUTE, 10_000))
    if got != expected:
        only_spark, only_python = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        raise CheckFailed(f"device-clocks: Spark's rows differ from plain Python's: only Spark has {only_spark[:3]}, "
                          f"only Python has {only_python[:3]}")
    wrong = sorted({d for d, *_, offset in got if not 0 <= offset + SKEWS_MS[d] <= MAX_DELAY_MS})
    if wrong:
        raise CheckFailed(f"device-clocks: the offset estimate of {wrong} is further than {MAX_DELAY_MS} ms off")
    offsets = {device: min(o for d, *_, o in got if d == device) for device in SKEWS_MS}  # the estimate only falls
    kinds = Counter((device, kind) for device, _, kind, *_ in got)
    late = Counter()
    for device, _, kind, events, *_ in got:
        late[device] += events if kind == "too-late" else 0
    table = report_table("device readings per minute of corrected event time", "device", "clock skew (true)",
                         "offset: min(received - sent)", "results", "corrections", "too-late readings", numbers=5)
    for device, skew in SKEWS_MS.items():
        table.add_row(device, f"{skew / 1000:+.1f} s", f"{offsets[device] / 1000:+.3f} s", str(kinds[device, "result"]),
                      str(kinds[device, "correction"]), str(late[device]))
    console.print(table)
    shown = [r for r in got if r[2] == "correction"][:3]
    console.print("corrections (a straggler for a published window): " + "; ".join(
        f"{d} {clock(s)} now {n} readings (revision {rev})" for d, s, _, n, rev, _ in shown))
    console.print(f"[green]✓[/] device-clocks: results, corrections and too-late counts equal plain Python's; "
                  f"every offset estimate is within {MAX_DELAY_MS} ms (one network delay) of the true skew")


def run(bootstrap: str, console, spark=None) -> None:
    console.rule("[bold]Stream analytics, search on streams and the three clocks on Spark")
    started = time.monotonic()
    views, readings = page_views(seed=11), device_readings(seed=12)
    with workspace(console, spark) as (session, workdir):
        _produce(bootstrap, views, readings)
        console.print(f"produced {len(views)} page views and {len(readings)} readings of {len(SKEWS_MS)} devices "
                      f"whose clocks are off by up to {max(map(abs, SKEWS_MS.values())) // 1000} s")
        rolling_stats(session, bootstrap, workdir, console, views)
        top_pages(session, bootstrap, workdir, console, views)
        search.percolator(session, bootstrap, workdir, console)
        device_clocks(session, bootstrap, workdir, console, readings)
    console.print(f"{time.monotonic() - started:.0f} s for the chapter")
