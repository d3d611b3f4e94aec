"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka 4.2 from `make jvm`) against
a Headwater broker: it writes a topic, and a shipped pipeline reading through it (from
Python and from `headwater pipelines run --source kafka`) answers as the same pipeline on
the `headwater` source and as plain Python."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from sparkdata import create_topic, read_back

from headwater.demo.shop_events import MINUTE, morning
from headwater.pipelines import reference
from headwater.pipelines.catalog import PIPELINES, Run
from headwater.testing import BrokerProcess

pytestmark = pytest.mark.xdist_group("spark")
LATENESS_MS = 5 * MINUTE
PER_TRIGGER = 25


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("kafka-connector") / "data") as proc:
        yield proc.bootstrap


def run_windows(spark, bootstrap: str, source: str, workdir: Path) -> dict:
    """The shipped `windows` pipeline over order-events, its input read by `source`: its SQLite answer."""
    params = {**PIPELINES["windows"].params, "events": "order-events", "lateness": "5 minutes",
              "per-trigger": str(PER_TRIGGER)}
    PIPELINES["windows"].start(Run(spark, {"bootstrap.servers": bootstrap}, workdir / "checkpoints", workdir,
                                   {"availableNow": True}, params, source=source)).awaitTermination()
    return window_counts(workdir / "windows.db")


def window_counts(path: Path) -> dict:
    db = sqlite3.connect(path)
    try:
        return {(s, u): n for s, u, n in db.execute("SELECT start_ms, user_id, events FROM window_counts")}
    finally:
        db.close()


@pytest.fixture(scope="module")
def order_events(spark, kafka_connector, broker) -> list[dict]:
    """The morning's orders in order-events, written by Spark's Kafka sink, in order (one task)."""
    orders = morning().orders
    create_topic(broker, "order-events", 1)    # one partition: the same micro-batches in every run
    frame = spark.createDataFrame([(e["event_id"], json.dumps(e)) for e in orders], "key string, value string")
    (frame.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", broker)
     .option("topic", "order-events").save())
    return orders


def expected_windows(orders: list[dict], per_trigger: int = PER_TRIGGER) -> dict:
    kept, _, watermark = reference.admitted(reference.micro_batches(orders, per_trigger), LATENESS_MS)
    return {k: n for k, n in Counter((e["ts_ms"] // MINUTE * MINUTE, e["user_id"]) for e in kept).items()
            if k[0] + MINUTE <= watermark}


def test_a_pipeline_reads_and_a_batch_writes_through_sparks_kafka_connector(spark, broker, order_events, tmp_path):
    written = read_back(broker, "order-events")
    assert [json.loads(written[where][1]) for where in sorted(written)] == order_events

    expected = expected_windows(order_events)
    through_kafka = run_windows(spark, broker, "kafka", tmp_path / "kafka")
    assert through_kafka == run_windows(spark, broker, "headwater", tmp_path / "headwater") == expected
    assert len(expected) > 20


def test_pipelines_run_reads_through_sparks_kafka_connector(kafka_connector, broker, order_events, tmp_path):
    """`headwater pipelines run --source kafka`, in a process of its own (this one holds the suite's session)."""
    command = [sys.executable, "-m", "headwater", "pipelines", "run", "windows", "--source", "kafka",
               "--conf", f"spark.jars={','.join(kafka_connector)}", "--bootstrap-server", broker,
               "--output", str(tmp_path), "--trigger", "available-now", "--set", "events=order-events",
               "--set", "lateness=5 minutes", "--set", f"per-trigger={len(order_events)}"]  # one micro-batch
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert window_counts(tmp_path / "windows.db") == expected_windows(order_events, len(order_events))
    # Spark's Kafka source keeps its first offsets there; the headwater source has no such log
    assert (tmp_path / "checkpoints" / "windows" / "sources" / "0").is_dir()
