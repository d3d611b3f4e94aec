"""The stream processing of DDIA chapter 11 as functions over Spark DataFrames.

One concept per module:

- lateness: the watermark, late events, counting the events dropped as too late
- reference: what every pipeline must answer, in plain Python (the watermark rule included): the yardstick of tests and demo
- windows: tumbling, hopping and session windows on event time
- sliding: a sliding window per event
- event_order: replaying a keyed stream in event-time order (for the processors below)
- cep: complex event processing (a pattern over a keyed stream)
- analytics: rates, rolling averages, percentiles, distinct counts and top keys per window
- clocks: device clock skew corrected by the broker's clock; corrections for stragglers
- window_join: stream-stream join (searches x clicks, click-through rate)
- changelog: reading a compacted changelog topic (key = id, value = JSON row, null = delete)
- enrichment: stream-table join (clicks enriched with the profile as of their time)
- materialized_view: table-table join maintained as a view (revenue per product)
- percolator: search on streams: standing queries (JSON), indexed by their words and field values
- standing_queries: the percolator as a pipeline, each document matched against the queries as of its time
- derived: a full-text index (SQLite FTS5) and a cache kept in sync from a CDC topic, exactly once
- exactly_once: idempotent sinks keyed on the micro-batch id (SQLite, PostgreSQL, Parquet, topic)
"""
