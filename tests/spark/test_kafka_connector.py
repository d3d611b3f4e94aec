"""Spark's own Kafka connector (`format("kafka")`, spark-sql-kafka 4.2 from `make jvm`) against
a Headwater broker: it writes a topic, and a shipped pipeline reading through it answers as
the same pipeline on the `headwater` source and as plain Python."""
from __future__ import annotations

import json
import sqlite3
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
    db = sqlite3.connect(workdir / "windows.db")
    try:
        return {(s, u): n for s, u, n in db.execute("SELECT start_ms, user_id, events FROM window_counts")}
    finally:
        db.close()


def test_a_pipeline_reads_and_a_batch_writes_through_sparks_kafka_connector(spark, kafka_connector, broker,
                                                                             tmp_path):
    orders = morning().orders
    create_topic(broker, "order-events", 1)    # one partition: the same micro-batches in every run
    # written by Spark's Kafka sink, in order (one task)
    frame = spark.createDataFrame([(e["event_id"], json.dumps(e)) for e in orders], "key string, value string")
    (frame.coalesce(1).write.format("kafka").option("kafka.bootstrap.servers", broker)
     .option("topic", "order-events").save())
    written = read_back(broker, "order-events")
    assert [json.loads(written[where][1]) for where in sorted(written)] == orders

    kept, _, watermark = reference.admitted(reference.micro_batches(orders, PER_TRIGGER), LATENESS_MS)
    expected = {k: n for k, n in Counter((e["ts_ms"] // MINUTE * MINUTE, e["user_id"]) for e in kept).items()
                if k[0] + MINUTE <= watermark}
    through_kafka = run_windows(spark, broker, "kafka", tmp_path / "kafka")
    assert through_kafka == run_windows(spark, broker, "headwater", tmp_path / "headwater") == expected
    assert len(expected) > 20
