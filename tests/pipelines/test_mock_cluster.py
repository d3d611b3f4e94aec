"""The `headwater` source and sink and the exactly-once topic sink against librdkafka's
mock cluster: three brokers, partition leaders spread over them, bootstrapped from one."""
from __future__ import annotations

import json

import pytest
from pyspark.sql import functions as F
from tests.support.sparkdata import headwater_batch, headwater_stream, read_back, run_to_end

from headwater.pipelines.exactly_once import TopicPerBatch
from headwater.testing import MockKafkaCluster


@pytest.fixture(scope="module")
def mock():
    return MockKafkaCluster(3, {"spark-in": 4, "spark-out": 4})


def test_source_and_sinks_on_three_brokers(spark, mock, tmp_path):
    leaders = mock.leaders("spark-in")
    assert set(leaders.values()) - {next(iter(mock.brokers))}, "some partition must be led by another broker"
    rows = [(f"k{i}", json.dumps({"n": i})) for i in range(120)]
    (spark.createDataFrame(rows, "key string, value string").write.format("headwater")
     .mode("append").option("kafka.bootstrap.servers", mock.bootstrap).option("topic", "spark-in").save())
    written = read_back(mock.bootstrap, "spark-in")
    assert sorted((k.decode(), v.decode()) for k, v in written.values()) == sorted(rows)
    assert len({p for p, _ in written}) == len(leaders)  # keys spread over every partition

    batch = headwater_batch(spark, mock.bootstrap, subscribe="spark-in").collect()
    assert {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in batch} == written

    stream = headwater_stream(spark, mock.bootstrap, subscribe="spark-in", startingOffsets="earliest",
                              maxOffsetsPerTrigger=50)
    streamed, query = run_to_end(stream, tmp_path / "ck")
    assert {(r.partition, r.offset): (bytes(r.key), bytes(r.value)) for r in streamed} == written
    assert len(query.recentProgress) >= 3  # 120 records, 50 per micro-batch

    mock.leaders("spark-out")  # creates it
    sink = TopicPerBatch({"bootstrap.servers": mock.bootstrap}, "spark-out", "key")
    doubled = stream.select(F.col("key").cast("string").alias("key"),
                            F.get_json_object(F.col("value").cast("string"), "$.n").cast("int").alias("n"))
    (doubled.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "ck-out"))
     .trigger(availableNow=True).start().awaitTermination())
    out = read_back(mock.bootstrap, "spark-out")
    assert sorted(json.loads(v)["n"] for _, v in out.values()) == list(range(120))  # each once
    assert {k for k, _ in out.values()} == {k.encode() for k, _ in rows}
