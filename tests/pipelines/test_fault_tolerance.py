"""Exactly-once results through stops, crashes and a killed driver.

The job (window_job.py) counts events per user and minute from a topic and writes the
windows to SQLite, Parquet and a topic. However it is interrupted, restarting it on its
checkpoint must leave the three sinks exactly as one uninterrupted run leaves them.
"""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from tests.support import window_job
from tests.support.sparkdata import MINUTE, batches_written, create_topic, headwater_batch, produce, user_events

from headwater.pipelines.exactly_once import _sort_key
from headwater.pipelines.reference import admitted, micro_batches

JOB = Path(window_job.__file__)


def publish(bootstrap):
    events = [e for batch in user_events(seed=9, batches=5, per_batch=8) for e in batch]
    create_topic(bootstrap, "events", 1)
    produce(bootstrap, "events", [(None, json.dumps(e).encode(), 0, None, None) for e in events])
    kept, _, final_wm = admitted(micro_batches(events, window_job.PER_TRIGGER), 2 * MINUTE)
    truth = Counter()
    for e in kept:
        truth[(e["ts_ms"] // MINUTE * MINUTE, e["user_id"])] += 1
    return {k: n for k, n in truth.items() if k[0] + MINUTE <= final_wm}


def contents(spark, bootstrap, workdir: Path, topic: str):
    """What each sink holds: {result_key: events}, with duplicates kept visible."""
    db = sqlite3.connect(workdir / "results.db")
    in_sqlite = Counter(db.execute("SELECT result_key, events FROM window_counts").fetchall())
    db.close()
    in_parquet = Counter((r.result_key, r.events) for r in spark.read.parquet(str(workdir / "parquet")).collect())
    in_topic = Counter((bytes(r.key).decode(), json.loads(bytes(r.value))["events"])
                       for r in headwater_batch(spark, bootstrap, subscribe=topic).collect())
    return in_sqlite, in_parquet, in_topic


def as_keys(truth):
    from tests.support.sparkdata import ts

    return Counter({(f"{ts(start)}/{user}", n): 1 for (start, user), n in truth.items()})


class CrashMidBatch:
    """Writes the first batch that has at least two rows to SQLite and Parquet and only
    half of it to the topic, then fails: a driver dying in the middle of its output."""

    def __init__(self, sinks):
        self.sinks = sinks

    def __call__(self, batch, batch_id):
        rows = sorted(batch.collect(), key=_sort_key)
        if len(rows) < 2:
            return self.sinks(batch, batch_id)
        self.sinks.sqlite(batch, batch_id)
        self.sinks.parquet(batch, batch_id)
        half = batch.sparkSession.createDataFrame(rows[:len(rows) // 2], batch.schema)
        self.sinks.topic(half, batch_id)
        raise RuntimeError(f"crashed while writing batch {batch_id}")


def test_stop_and_crash_then_restart_equal_an_uninterrupted_run(spark, broker, tmp_path):
    truth = publish(broker.bootstrap)
    for topic in ("counts-ref", "counts"):
        create_topic(broker.bootstrap, topic, 2)
    ref = tmp_path / "ref"
    window_job.start(spark, broker.bootstrap, "events", "counts-ref", ref, {"availableNow": True}).awaitTermination()

    run = tmp_path / "run"
    query = window_job.start(spark, broker.bootstrap, "events", "counts", run, {"processingTime": "500 milliseconds"})
    deadline = time.monotonic() + 180
    while (query.lastProgress is None or query.lastProgress["batchId"] < 1) and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()  # mid-stream: more input is waiting
    with pytest.raises(Exception, match="crashed while writing batch"):
        window_job.start(spark, broker.bootstrap, "events", "counts", run, {"availableNow": True},
                         sinks=CrashMidBatch(window_job.Sinks(broker.bootstrap, "counts", run))).awaitTermination()
    window_job.start(spark, broker.bootstrap, "events", "counts", run, {"availableNow": True}).awaitTermination()

    expected = as_keys(truth)
    assert len(expected) >= 10
    assert contents(spark, broker.bootstrap, run, "counts") == contents(spark, broker.bootstrap, ref, "counts-ref") \
        == (expected, expected, expected)


def test_driver_killed_with_sigkill_then_rerun(spark, broker, tmp_path):
    truth = publish(broker.bootstrap)
    create_topic(broker.bootstrap, "counts", 2)
    work = tmp_path / "job"
    work.mkdir()
    args = [sys.executable, str(JOB), broker.bootstrap, "events", "counts", str(work)]
    driver = subprocess.Popen(args, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=open(tmp_path / "driver.log", "wb"))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and driver.poll() is None and batches_written(work / "results.db") < 2:
        time.sleep(0.2)
    assert driver.poll() is None, (tmp_path / "driver.log").read_text()[-3000:]
    os.killpg(driver.pid, signal.SIGKILL)  # the Python driver and its JVM, mid-stream
    driver.wait()

    # The rerun needs no driver of its own to kill: the suite's session continues the checkpoint.
    window_job.start(spark, broker.bootstrap, "events", "counts", work, {"availableNow": True}).awaitTermination()

    expected = as_keys(truth)
    assert contents(spark, broker.bootstrap, work, "counts") == (expected, expected, expected)



def test_a_checkpoint_keeps_its_state_partitions_when_the_default_changes(spark, broker, tmp_path):
    """Spark records spark.sql.shuffle.partitions in a checkpoint and a restart uses the
    recorded number: a query begun under the former default (2) goes on, with its state,
    under the session's default and ends with the counts of one uninterrupted run."""
    truth = publish(broker.bootstrap)
    create_topic(broker.bootstrap, "counts", 2)
    run, default = tmp_path / "run", spark.conf.get("spark.sql.shuffle.partitions")
    assert default != "2"   # the restart below runs under another number than the checkpoint's
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        query = window_job.start(spark, broker.bootstrap, "events", "counts", run, {"processingTime": "500 milliseconds"})
        deadline = time.monotonic() + 180
        while (query.lastProgress is None or query.lastProgress["batchId"] < 1) and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()  # mid-stream, with windows still open in the state
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", default)
    window_job.start(spark, broker.bootstrap, "events", "counts", run, {"availableNow": True}).awaitTermination()

    expected = as_keys(truth)
    assert contents(spark, broker.bootstrap, run, "counts") == (expected, expected, expected)
    assert sorted(p.name for p in (run / "checkpoint" / "state" / "0").iterdir() if p.name.isdigit()) == ["0", "1"]
