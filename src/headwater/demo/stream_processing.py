"""Chapter: stream processing on Spark. The shop's morning (orders, searches, clicks,
profile changes, payments: `shop_events`) goes into Headwater topics and through the
pipelines of `headwater.pipelines`: each one a Structured Streaming query reading the
`headwater` source with trigger(availableNow=True) into an exactly-once sink.

Each pipeline is a scene: a plain function that starts its query, waits for it, prints
its results and checks them against plain Python (`headwater.pipelines.reference`). The
scenes run one after another (several transformWithState queries started together once
left a Python worker waiting forever for its state server). A difference raises
`CheckFailed`, and `make demo` exits non-zero. The plumbing is in `spark_chapter`.
"""
from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from pyspark.sql import functions as F

from headwater.demo.shop_events import MINUTE, morning
from headwater.demo.spark_chapter import LATENESS, LATENESS_MS, Chapter, clock, report_table, workspace
from headwater.pipelines import (cep, changelog, enrichment, exactly_once, lateness, materialized_view, reference,
                                 window_join, windows)

ORDER = "event_id string, user_id string, product_id string, quantity int, ts_ms long"
SEARCH = "event_id string, session_id string, user_id string, term string, ts_ms long"
CLICK = "event_id string, session_id string, user_id string, product_id string, ts_ms long"
PAYMENT = "event_id string, card_id string, status string, ts_ms long"
PROFILE = "name string, tier string, city string"


def _in_cents(view: dict) -> dict:
    return {product: (name, n, round(revenue, 2)) for product, (name, n, revenue) in view.items()}


def order_windows(chapter: Chapter) -> None:
    """Orders per 10-minute tumbling and 20-minute hopping window; too-late orders dropped."""
    orders = lateness.on_time(chapter.events("order-events", ORDER), "event_time", LATENESS)
    starts = [F.unix_millis("window_start").alias("start_ms"), "events"]
    tumbling_query = chapter.start("tumbling windows", windows.tumbling_counts(orders, "event_time", "10 minutes")
                                   .select(*starts), chapter.upsert("tumbling", "start_ms"))
    hopping_query = chapter.start("hopping windows", windows.hopping_counts(orders, "event_time", "20 minutes",
                                                                            "10 minutes").select(*starts),
                                  chapter.upsert("hopping", "start_ms"))
    chapter.wait(tumbling_query, hopping_query)
    tumbling = dict(chapter.rows("tumbling", "start_ms, events"))
    hopping = dict(chapter.rows("hopping", "start_ms, events"))

    kept, dropped, watermark = chapter.admitted("order-events")
    table = report_table("orders per window of event time", "window from", "10-min tumbling", "20-min hopping",
                         numbers=2)
    for start in sorted(set(tumbling) | set(hopping)):
        table.add_row(clock(start), *(str(found.get(start, "open" if start + size > watermark else "-"))
                                      for found, size in ((tumbling, 10 * MINUTE), (hopping, 20 * MINUTE))))
    chapter.console.print(table)
    spark_dropped = lateness.dropped_events(tumbling_query)
    chapter.console.print(
        f"{reference.late_events(kept)} orders arrived late but within the {LATENESS} allowed, and count in their "
        f"windows; {spark_dropped} arrived too late (placed offline, delivered 40 minutes on): dropped, and "
        f"counted as dropped by Spark (numRowsDroppedByWatermark); one order delivered twice counts once. "
        f"Watermark at the end: {clock(watermark)} (windows ending after it are still open).")
    chapter.check("windows", tumbling=(tumbling, reference.window_counts(kept, watermark, 10 * MINUTE)),
                  hopping=(hopping, reference.window_counts(kept, watermark, 20 * MINUTE, 10 * MINUTE)),
                  dropped=((spark_dropped, lateness.dropped_events(hopping_query)), (dropped, dropped)))


def click_sessions(chapter: Chapter) -> None:
    """Click sessions per user: a session ends after 5 minutes without a click."""
    clicks = lateness.on_time(chapter.events("clicks", CLICK), "event_time", LATENESS)
    sessions = windows.session_counts(clicks, "event_time", "5 minutes", ["user_id"])
    query = chapter.start("session windows", sessions.select(
        "user_id", F.unix_millis("window_start").alias("start_ms"), F.unix_millis("window_end").alias("end_ms"),
        "events"), chapter.upsert("sessions", "user_id", "start_ms"))
    chapter.wait(query)
    got = {(u, s): (e, n) for u, s, e, n in chapter.rows("sessions", "user_id, start_ms, end_ms, events")}
    kept, _, watermark = chapter.admitted("clicks")

    table = report_table("click sessions per user (a session ends after 5 minutes without a click)", "user",
                         "sessions: first click - end (clicks)")
    for user in sorted({u for u, _ in got}):
        table.add_row(user, ", ".join(f"{clock(s)}-{clock(e)} ({n})" for (u, s), (e, n) in sorted(got.items())
                                      if u == user))
    chapter.console.print(table)
    chapter.check("session windows", sessions=(got, reference.sessions(kept, watermark, 5 * MINUTE)))


def click_through(chapter: Chapter) -> None:
    """Stream-stream join: searches x clicks within 10 minutes, and the click-through rate per term."""
    searches = chapter.events("searches", SEARCH).withColumnRenamed("event_id", "search_id")
    clicks = chapter.events("clicks", CLICK).withColumnRenamed("event_id", "click_id")
    outcomes_path = chapter.workdir / "search_outcomes"
    query = chapter.start("searches x clicks", window_join.search_outcomes(
        lateness.on_time(searches, "event_time", LATENESS, ["search_id"]),
        lateness.on_time(clicks, "event_time", LATENESS, ["click_id"])),
        exactly_once.ParquetPerBatch(outcomes_path))
    chapter.wait(query)
    outcomes = chapter.spark.read.parquet(str(outcomes_path))
    rows = outcomes.collect()
    pairs = {(r.search_id, r.click_id) for r in rows if r.clicked}
    misses = {r.search_id for r in rows if not r.clicked}
    rates = {r.term: (r.searches, r.clicked_searches) for r in window_join.click_through_rates(outcomes).collect()}

    table = report_table("click-through rate per search term", "term", "searches", "clicked", "CTR", numbers=3)
    for term, (n, clicked) in sorted(rates.items()):
        table.add_row(term, str(n), str(clicked), f"{clicked / n:.0%}")
    chapter.console.print(table)
    want_pairs, want_misses = reference.search_outcomes(chapter.morning.searches, chapter.morning.clicks,
                                                        10 * MINUTE, LATENESS_MS)
    undecided = len(chapter.morning.searches) - len({s for s, _ in pairs} | misses)
    chapter.console.print(f"a search counts as clicked when a click of the same session follows within 10 "
                          f"minutes; {undecided} searches without a click are still open (the watermark has not "
                          f"passed their 10 minutes)")
    chapter.check("stream-stream join", pairs=(pairs, want_pairs), misses=(misses, want_misses),
                  rates=(rates, reference.click_through(chapter.morning.searches, want_pairs, want_misses)))


def enriched_clicks(chapter: Chapter) -> None:
    """Stream-table join: each click with the user's profile as of the click."""
    clicks = chapter.events("clicks", CLICK).select(F.col("event_id").alias("click_id"), "user_id", "event_time")
    profiles = changelog.changes(chapter.records("user-profiles"), PROFILE)  # the whole table in the first batch
    query = chapter.start("clicks x user profiles", enrichment.enrich_clicks(clicks, profiles, LATENESS).select(
        "click_id", "user_id", F.unix_millis("click_time").alias("click_ms"), "profile"),
        chapter.upsert("enriched_clicks", "click_id"))
    chapter.wait(query)
    got = {c: (u, t, p and json.loads(p))
           for c, u, t, p in chapter.rows("enriched_clicks", "click_id, user_id, click_ms, profile")}

    changes = [{"event_id": f"change:{seq}", "user_id": user, "row": row, "ts_ms": t, "kind": enrichment.CHANGE,
                "seq": seq} for seq, (user, row, t) in enumerate(chapter.morning.profiles)]
    batches = [[{**c, "kind": enrichment.CLICK} for c in chunk]
               for chunk in chapter.batches("clicks")]
    batches[0] += changes
    table = report_table("clicks x user profiles, as of each click", "time", "user", "click", "tier", "city")
    previous = {}
    for click, (user, t, profile) in sorted(got.items(), key=lambda item: item[1][1]):
        if user not in previous or previous[user] != profile:
            table.add_row(clock(t, True), user, click, *(profile[k] if profile else "-" for k in ("tier", "city")))
        previous[user] = profile
    chapter.console.print(table)
    chapter.console.print(f"{len(got)} clicks enriched; shown: each user's first click and every click that sees "
                          f"a changed profile (cho deleted at 09:20, ben upgraded at 09:25, ana moved at 09:30)")
    chapter.check("stream-table join", enriched=(got, reference.profiles_at_clicks(batches, LATENESS_MS)))


def revenue_view(chapter: Chapter) -> None:
    """Table-table join: revenue per product maintained from two changelogs, before and after changes."""
    view_db = chapter.workdir / "view.db"
    tables = chapter.records("shop-orders,shop-products")

    def maintain():  # one name, so one checkpoint: a second run goes on where the first stopped
        return chapter.start("revenue view", tables, materialized_view.RevenueView(view_db, "shop-orders",
                                                                                  "shop-products"))

    first_run = maintain()
    chapter.wait(first_run)
    before = _in_cents(materialized_view.read_view(view_db))
    orders = {o["event_id"]: o for o in chapter.morning.orders}
    products = dict(chapter.morning.products)
    want_before = reference.revenue_per_product(orders, products)
    producer = Producer({"bootstrap.servers": chapter.bootstrap, "enable.idempotence": True})
    for topic, key, row in chapter.morning.table_changes:
        producer.produce(f"shop-{topic}", None if row is None else json.dumps(row), key)
        table = orders if topic == "orders" else products
        if row is None:
            del table[key]
        else:
            table[key] = row
    if producer.flush(30):
        raise RuntimeError("the table changes were not acknowledged")
    chapter.wait(maintain())
    after = _in_cents(materialized_view.read_view(view_db))

    table = report_table("revenue per product: orders x products, maintained from both changelogs",
                         "product", "name", "orders", "revenue", "after the changes", numbers=3)
    for product in sorted(set(before) | set(after)):
        name, n, revenue = before[product]
        then = after.get(product)
        changed = "[bold]" if then != before[product] else ""
        table.add_row(product, name, str(n), f"{revenue:,.2f}",
                      f"{changed}{then[1]} orders, {then[2]:,.2f}" if then else "[bold]gone")
    chapter.console.print(table)
    chapter.console.print("the changes: tent's price 200.00 -> 180.00 (an update), rope removed from the "
                          "catalogue and order o042 cancelled (deletes, as tombstones)")
    chapter.check("table-table join", before=(before, _in_cents(want_before)),
                  after=(after, _in_cents(reference.revenue_per_product(orders, products))))


def fraud_patterns(chapter: Chapter) -> None:
    """Complex event processing: three failed payments then a success on one card raise an alert."""
    payments = chapter.events("payments", PAYMENT).withColumnRenamed("event_id", "payment_id")
    matches = cep.failures_then_success(lateness.on_time(payments, "event_time", LATENESS, ["payment_id"]))
    query = chapter.start("payment patterns", matches.select(
        "card_id", F.unix_millis("first_failure").alias("first_failure_ms"),
        F.unix_millis("success_time").alias("success_ms"), "failures", "payment_id"),
        exactly_once.TopicPerBatch({"bootstrap.servers": chapter.bootstrap}, "payment-alerts", "card_id"))
    chapter.wait(query)
    alerts = (chapter.spark.read.format("headwater").option("kafka.bootstrap.servers", chapter.bootstrap)
              .option("subscribe", "payment-alerts").load().collect())
    got = {tuple(json.loads(bytes(r.value)).values()) for r in alerts}

    table = report_table("payment-alerts (complex events)", "card", "first failure", "success", "payment",
                         "failures", numbers=1)
    for card, first, success, failures, payment in sorted(got):
        table.add_row(card, clock(first, True), clock(success, True), payment, str(failures))
    chapter.console.print(table)
    chapter.console.print("the pattern: three or more failed payments on a card, then a success, within 10 "
                          "minutes. card-4242's second failure arrived after its success: the pattern runs in "
                          "event-time order. card-1881 (success 11 minutes after its failures) and card-7007 (two "
                          "failures) raise no alert.")
    kept, _, watermark = chapter.admitted("payments")
    chapter.check("complex event processing", alerts=(got, reference.card_testing(kept, watermark, cep.WINDOW_MS)))


SCENES = (order_windows, click_sessions, click_through, enriched_clicks, revenue_view, fraud_patterns)


def run(bootstrap: str, console, spark=None) -> None:
    """The chapter against a broker; a SparkSession can be passed in (it is then left
    running), otherwise one is started, its output in a log, and stopped."""
    console.rule("[bold]Stream processing on Spark: windows, joins, a materialized view, patterns")
    started = time.monotonic()
    with workspace(console, spark) as (session, workdir):
        chapter = Chapter(bootstrap, console, session, workdir, morning())
        try:
            chapter.produce()
            for scene in SCENES:
                scene(chapter)
        finally:
            chapter.stop()
    console.print(f"{len(chapter.queries)} Spark queries; {time.monotonic() - started:.0f} s for the chapter")
