"""Stream-stream join (window join): which searches led to a click.

A search and a click match when they belong to the same session and the click comes
at most `within` after the search. Both sides are buffered in Spark's join state until
the watermark says no partner can still arrive; a search nobody clicked on is emitted
then, as a non-click (left outer join). Click-through rate per search term is a view
over these outcomes.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def search_outcomes(searches: DataFrame, clicks: DataFrame, within: str = "10 minutes") -> DataFrame:
    """searches: session_id, search_id, term, event_time; clicks: session_id, click_id,
    event_time; both through `lateness.on_time` (they carry watermarks).

    One row per (search, click) pair, and one row with clicked = false per search that
    got no click within the bound: search_id, term, search_time, click_id, clicked."""
    s = searches.select("session_id", "search_id", "term", F.col("event_time").alias("search_time"))
    c = clicks.select(F.col("session_id").alias("click_session"), "click_id", F.col("event_time").alias("click_time"))
    joined = s.join(c, F.expr(f"""click_session = session_id AND click_time >= search_time
                                  AND click_time <= search_time + interval {within}"""), "leftOuter")
    return joined.select("search_id", "term", "search_time", "click_id", F.col("click_id").isNotNull().alias("clicked"))


def click_through_rates(outcomes: DataFrame) -> DataFrame:
    """term, searches, clicked_searches, ctr: the share of searches with at least one click."""
    per_search = outcomes.groupBy("search_id", "term").agg(F.max(F.col("clicked").cast("int")).alias("clicked"))
    return (per_search.groupBy("term")
            .agg(F.count(F.lit(1)).alias("searches"), F.sum("clicked").alias("clicked_searches"))
            .withColumn("ctr", F.col("clicked_searches") / F.col("searches")))
