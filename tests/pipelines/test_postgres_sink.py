"""PostgresUpsert: exactly-once results in a real PostgreSQL table.

The streaming job is window_job's per-user minute counts in update mode, so a window's
row is overwritten as its count grows; the table must end as the plain-Python count of
the events the watermark admits, however the query is interrupted.
"""

import datetime
import json
import threading
from collections import Counter
from decimal import Decimal

import psycopg2
import pytest
from tests.support import window_job
from tests.support.sparkdata import MINUTE, create_topic, produce, user_events

from headwater.pipelines.exactly_once import PostgresUpsert
from headwater.pipelines.reference import admitted, micro_batches
from headwater.testing import PostgresServer, sql, wait_until


def test_types_replayed_batch_and_updates(spark, pg_db):
    schema = ("user_id string, n long, score double, seen timestamp, active boolean, amount decimal(10,2), "
              "tags array<string>, day date")
    seen = datetime.datetime(2024, 1, 2, 3, 4, 5)
    first = [("ann", 1, 0.5, seen, True, Decimal("12.34"), ["a", "b"], datetime.date(2024, 1, 2)),
             ("bob", 2, None, None, None, None, None, None)]
    sink = PostgresUpsert(pg_db, "users", ["user_id"])
    sink(spark.createDataFrame(first, schema), 0)
    sink(spark.createDataFrame([("ann", 7, 1.0, seen, False, Decimal(0), [], None)], schema), 0)  # replay: ignored
    sink(spark.createDataFrame([("ann", 3, 2.5, seen, False, Decimal("-1.50"), ["c"], None),
                                ("cy", 4, 1.0, seen, True, Decimal("0.01"), [], None)], schema), 1)

    types = dict(sql(pg_db, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'users'"))
    assert types == {"user_id": "text", "n": "bigint", "score": "double precision", "seen": "timestamp with time zone",
                     "active": "boolean", "amount": "numeric", "tags": "jsonb", "day": "date", "batch_id": "bigint"}
    aware = seen.astimezone()  # Spark reads a naive datetime as local time
    assert sql(pg_db, "SELECT * FROM users ORDER BY user_id") == [
        ("ann", 3, 2.5, aware, False, Decimal("-1.50"), ["c"], None, 1),
        ("bob", 2, None, None, None, None, None, None, 0),
        ("cy", 4, 1.0, aware, True, Decimal("0.01"), [], None, 1)]
    assert sql(pg_db, "SELECT sink, batch_id, rows FROM spark_batches ORDER BY batch_id") == [
        ("users", 0, 2), ("users", 1, 2)]


def test_concurrent_replays_write_a_batch_once(spark, pg_db):
    """Two writers of batch 1 at once: the second waits on the first's claim of the
    batch, then does nothing (its different rows show whether it wrote)."""
    sink = PostgresUpsert(pg_db, "totals", ["user_id"])
    batch = lambda rows: spark.createDataFrame(rows, "user_id string, n long")  # noqa: E731
    sink(batch([("ann", 1), ("bob", 2)]), 0)
    blocker = psycopg2.connect(pg_db)  # holds ann's row so the first writer stops inside its transaction
    blocker.cursor().execute("SELECT * FROM totals WHERE user_id = 'ann' FOR UPDATE")
    errors = []

    def write(rows):
        try:
            sink(batch(rows), 1)
        except Exception as err:  # reported by the assertion below
            errors.append(err)

    def waiting():
        return sql(pg_db, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                          "AND wait_event_type = 'Lock'")[0][0]

    writers = [threading.Thread(target=write, args=([("ann", 10), ("bob", 20)],)),
               threading.Thread(target=write, args=([("ann", 99), ("bob", 99)],))]
    for n, writer in enumerate(writers, 1):
        writer.start()
        wait_until(lambda: waiting() == n, what=f"{n} writers waiting on a lock")
    blocker.commit()
    blocker.close()
    for writer in writers:
        writer.join(60)
    assert errors == []
    assert sql(pg_db, "SELECT user_id, n, batch_id FROM totals ORDER BY user_id") == [("ann", 10, 1), ("bob", 20, 1)]
    assert sql(pg_db, "SELECT batch_id, rows FROM spark_batches ORDER BY batch_id") == [(0, 2), (1, 2)]


def publish(bootstrap) -> dict:
    """The events on a one-partition topic; returns {(user, window start ms): events admitted}."""
    events = [e for batch in user_events(seed=11, batches=5, per_batch=window_job.PER_TRIGGER) for e in batch]
    create_topic(bootstrap, "events", 1)
    produce(bootstrap, "events", [(None, json.dumps(e).encode(), 0, None, None) for e in events])
    kept, dropped, _ = admitted(micro_batches(events, window_job.PER_TRIGGER), 2 * MINUTE)
    assert dropped > 0
    return dict(Counter((e["user_id"], e["ts_ms"] // MINUTE * MINUTE) for e in kept))


def start(spark, bootstrap, sink, checkpoint, **trigger):
    return (window_job.counts(spark, bootstrap, "events").writeStream.outputMode("update").foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())


def contents(dsn, table) -> dict:
    rows = sql(dsn, f"SELECT user_id, window_start, events FROM {table}")
    return {(user, int(start.timestamp() * 1000)): n for user, start, n in rows}


class CrashAfterWrite:
    """Writes the first batch that has rows, then fails before Spark can record it as
    done: the restarted query replays a batch the table already holds."""

    def __init__(self, sink):
        self.sink = sink

    def __call__(self, batch, batch_id):
        self.sink(batch, batch_id)
        if not batch.isEmpty():
            raise RuntimeError(f"crashed after writing batch {batch_id}")


def test_stop_and_crash_then_restart_equal_an_uninterrupted_run(spark, broker, pg_db, tmp_path):
    truth = publish(broker.bootstrap)
    assert len(truth) >= 10
    start(spark, broker.bootstrap, PostgresUpsert(pg_db, "counts_ref", ["result_key"]), tmp_path / "ref",
          availableNow=True).awaitTermination()
    assert contents(pg_db, "counts_ref") == truth

    sink = PostgresUpsert(pg_db, "counts", ["result_key"])
    query = start(spark, broker.bootstrap, sink, tmp_path / "run", processingTime="500 milliseconds")
    wait_until(lambda: (query.lastProgress or {}).get("batchId", -1) >= 1, timeout=180, what="two batches")
    query.stop()
    assert contents(pg_db, "counts") != truth  # stopped mid-stream: more input is waiting
    with pytest.raises(Exception, match="crashed after writing batch"):
        start(spark, broker.bootstrap, CrashAfterWrite(sink), tmp_path / "run", availableNow=True).awaitTermination()
    start(spark, broker.bootstrap, sink, tmp_path / "run", availableNow=True).awaitTermination()

    assert contents(pg_db, "counts") == truth
    ids = [i for (i,) in sql(pg_db, "SELECT batch_id FROM spark_batches WHERE sink = 'counts' ORDER BY batch_id")]
    assert ids == list(range(len(ids)))


def test_stopped_postgres_fails_clearly_then_restart_completes(spark, broker, tmp_path):
    truth = publish(broker.bootstrap)
    server = PostgresServer()  # its own, to stop it without touching the shared one
    try:
        sink = PostgresUpsert(server.dsn, "counts", ["result_key"])

        def write_then_stop_postgres(batch, batch_id):
            sink(batch, batch_id)
            if batch_id == 1:
                server.halt()

        with pytest.raises(Exception) as failure:
            query = start(spark, broker.bootstrap, write_then_stop_postgres, tmp_path / "job", availableNow=True)
            query.awaitTermination()
        server.start()
        assert f"PostgresUpsert(counts) at 127.0.0.1:{server.port}/postgres: batch 2 not written" in str(failure.value)
        start(spark, broker.bootstrap, sink, tmp_path / "job", availableNow=True).awaitTermination()
        assert contents(server.dsn, "counts") == truth
    finally:
        server.stop()
