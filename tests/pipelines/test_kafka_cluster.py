"""The `headwater` Spark source and sinks (the suite's local session), and a shipped pipeline
through `headwater pipelines run` on the session's Spark standalone cluster, on Apache Kafka
(three nodes: the session's `kafka_cluster`), a node killed mid-run each time."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections import Counter

from pyspark.sql import functions as F
from tests.support.kafka_cluster import leader_of
from tests.support.sparkdata import MINUTE, create_topic, headwater_batch, headwater_stream, produce, read_back, run_to_end
from tests.pipelines.test_pipelines_run import BAD, LATENESS_MS, PER_TRIGGER, dead_letters, mixed_records

from headwater.pipelines import reference
from headwater.pipelines.exactly_once import TopicPerBatch
from headwater.testing import wait_until


def test_source_and_sinks_across_a_node_crash(spark, kafka_cluster, tmp_path):
    bootstrap = kafka_cluster.bootstrap
    rows = [(f"k{i}", json.dumps({"n": i})) for i in range(120)]
    (spark.createDataFrame(rows, "key string, value string").write.format("headwater")
     .mode("append").option("kafka.bootstrap.servers", bootstrap).option("topic", "spark-in").save())
    written = read_back(bootstrap, "spark-in")
    assert sorted((k.decode(), v.decode()) for k, v in written.values()) == sorted(rows)
    assert len({p for p, _ in written}) == 3   # keys spread over every partition, so over every leader

    stream = headwater_stream(spark, bootstrap, subscribe="spark-in", startingOffsets="earliest",
                              maxOffsetsPerTrigger=50)
    create_topic(bootstrap, "spark-out", 3)
    sink = TopicPerBatch({"bootstrap.servers": bootstrap}, "spark-out", "key")
    doubled = stream.select(F.col("key").cast("string").alias("key"),
                            F.get_json_object(F.col("value").cast("string"), "$.n").cast("int").alias("n"))
    with kafka_cluster.node_down(leader_of(bootstrap, "spark-in")):
        batch = headwater_batch(spark, bootstrap, subscribe="spark-in").collect()
        streamed, query = run_to_end(stream, tmp_path / "ck")
        (doubled.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck-out"))
         .trigger(availableNow=True).start().awaitTermination())
    assert {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in batch} == written
    assert {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in streamed} == written
    assert len(query.recentProgress) >= 3   # 120 records, 50 per micro-batch
    out = read_back(bootstrap, "spark-out")
    assert sorted(json.loads(v)["n"] for _, v in out.values()) == list(range(120))   # each once
    assert {k for k, _ in out.values()} == {k.encode() for k, _ in rows}


def test_pipelines_run_across_a_node_crash(kafka_cluster, spark_cluster, tmp_path):
    """tests/pipelines/test_pipelines_run.py's windows pipeline, its records and its ground truth,
    run by the command on the Spark standalone cluster against the Kafka cluster: a Kafka node is
    killed once the command has read its first micro-batch."""
    bootstrap = kafka_cluster.bootstrap
    records = mixed_records()
    chunks = reference.micro_batches(records, PER_TRIGGER)
    kept, _, watermark = reference.admitted([[e for _, _, e in c if e is not None] for c in chunks], LATENESS_MS)
    windows = Counter((e["ts_ms"] // MINUTE * MINUTE, e["user_id"]) for e in kept)
    expected = {k: n for k, n in windows.items() if k[0] + MINUTE <= watermark}

    create_topic(bootstrap, "clicks", 1)   # one partition: offsets cut the micro-batches as in the reference
    create_topic(bootstrap, "windows.dlq", 1)
    produce(bootstrap, "clicks", [(k, v, 0, None, None) for k, v, _ in records], acks="all")
    log = tmp_path / "pipeline.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "headwater", "pipelines", "run", "windows", "--master",
                                 spark_cluster.master_url, "--bootstrap-server", bootstrap, "--output",
                                 str(tmp_path / "out"), "--trigger", "available-now", "--set", "events=clicks",
                                 "--set", f"per-trigger={PER_TRIGGER}"], stdout=subprocess.DEVNULL, stderr=stderr,
                                env=spark_cluster.driver_env())
    try:
        wait_until(lambda: proc.poll() is not None or "pipeline=windows batch=0 " in log.read_text(errors="replace"),
                   timeout=300, what="the pipeline's first micro-batch")
        with kafka_cluster.node_down(leader_of(bootstrap, "clicks")):
            wait_until(lambda: proc.poll() is not None or "pipeline=windows batch=2 " in log.read_text(errors="replace"),
                       timeout=300, what="micro-batches during the outage")
        assert proc.wait(600) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        proc.kill()
        proc.wait()
    db = sqlite3.connect(tmp_path / "out" / "windows.db")
    got = {(s, u): n for s, u, n in db.execute("SELECT start_ms, user_id, events FROM window_counts")}
    db.close()
    assert got == expected and len(expected) > 10
    reasons = dict(BAD)
    assert dead_letters(bootstrap, "windows.dlq") == {
        offset: (k, v, reasons[v], "clicks", "0") for offset, (k, v, e) in enumerate(records) if e is None}
