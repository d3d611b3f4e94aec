"""A streaming job for the fault-tolerance tests: per-user tumbling window counts from
a topic, written exactly-once to SQLite, Parquet and a topic.

Run as a script it is a Spark driver of its own (a one-second trigger), so a test can SIGKILL it:
    python window_job.py BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC WORKDIR
"""

import sys
from pathlib import Path

from pyspark.sql import functions as F

from headwater.pipelines import exactly_once, lateness, windows

EVENT = "event_id string, user_id string, ts_ms long"
PER_TRIGGER = 8  # maxOffsetsPerTrigger: ground truth must model these micro-batches


def counts(spark, bootstrap: str, topic: str):
    events = (spark.readStream.format("headwater").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", PER_TRIGGER)
              .load()
              .select(F.from_json(F.col("value").cast("string"), EVENT).alias("e")).select("e.*")
              .withColumn("event_time", F.timestamp_millis("ts_ms")))
    out = windows.tumbling_counts(lateness.on_time(events, "event_time", "2 minutes"), "event_time", "1 minute",
                                  ["user_id"])
    return out.withColumn("result_key", F.concat_ws("/", F.col("window_start").cast("string"), "user_id"))


class Sinks:
    """All three exactly-once sinks for one micro-batch."""

    def __init__(self, bootstrap: str, output_topic: str, workdir: Path):
        self.sqlite = exactly_once.SqliteUpsert(workdir / "results.db", "window_counts", ["result_key"])
        self.parquet = exactly_once.ParquetPerBatch(workdir / "parquet")
        self.topic = exactly_once.TopicPerBatch({"bootstrap.servers": bootstrap}, output_topic, "result_key")

    def __call__(self, batch, batch_id):
        batch.persist()
        self.sqlite(batch, batch_id)
        self.parquet(batch, batch_id)
        self.topic(batch, batch_id)
        batch.unpersist()


def start(spark, bootstrap, input_topic, output_topic, workdir: Path, trigger: dict, sinks=None):
    return (counts(spark, bootstrap, input_topic).writeStream
            .foreachBatch(sinks or Sinks(bootstrap, output_topic, workdir))
            .option("checkpointLocation", str(workdir / "checkpoint")).trigger(**trigger).start())


if __name__ == "__main__":
    import headwater.spark

    bootstrap, input_topic, output_topic, workdir = sys.argv[1:]
    spark = headwater.spark.session(app_name="window-job")
    query = start(spark, bootstrap, input_topic, output_topic, Path(workdir), {"processingTime": "1 second"})
    query.awaitTermination()
