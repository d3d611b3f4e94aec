"""Test data for the pipelines and the plain-Python model of Spark's watermark.

Streams are fed in fixed micro-batches (one JSON file per batch with the file
source's maxFilesPerTrigger=1, or maxOffsetsPerTrigger on a one-partition topic) and
run with trigger(availableNow=True), so the batch boundaries, and with them the
watermark, are the same in every run.
"""

from __future__ import annotations

import datetime
import json
import os
import random
import uuid

BASE_MS = 1_700_000_000_000 // 3_600_000 * 3_600_000  # an hour boundary
MINUTE = 60_000


def ts(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).replace(tzinfo=None)


def write_batches(directory, batches: list[list[dict]]) -> str:
    """One JSON-lines file per micro-batch, modification times in batch order (the
    file source takes files oldest first)."""
    os.makedirs(directory, exist_ok=True)
    for i, batch in enumerate(batches):
        path = os.path.join(directory, f"batch-{i:04d}.json")
        with open(path, "w") as f:
            for event in batch:
                f.write(json.dumps(event) + "\n")
        os.utime(path, (1_600_000_000 + i, 1_600_000_000 + i))
    return str(directory)


def file_stream(spark, directory, schema: str, time_field: str = "ts_ms"):
    from pyspark.sql import functions as F

    return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))
            .withColumn("event_time", F.timestamp_millis(time_field)))


def run_to_end(df, checkpoint, name: str | None = None, mode: str = "append"):
    """Run a streaming DataFrame over everything available into a memory table."""
    name = name or "t_" + uuid.uuid4().hex[:8]
    query = (df.writeStream.format("memory").queryName(name).outputMode(mode)
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    query.awaitTermination()
    return df.sparkSession.table(name).collect(), query


def admitted(batches: list[list[dict]], lateness_ms: int, time_field: str = "ts_ms"):
    """Which events survive the watermark, and how many are dropped.

    Spark's watermark after a batch is the largest event time seen minus the
    lateness; with a chain of stateful operators an event is dropped when its time is
    at or before the watermark of the *previous* batch (late-event watermark).
    """
    kept, dropped, seen = [], 0, set()
    max_seen = None
    watermarks = [0]  # watermark in force for batch i (0 = none yet)
    for i, batch in enumerate(batches):
        late_watermark = watermarks[i - 1] if i >= 1 else 0
        for event in batch:
            if i >= 1 and late_watermark > 0 and event[time_field] <= late_watermark:
                dropped += 1
            elif event["event_id"] not in seen:  # a repeated delivery is not counted twice
                seen.add(event["event_id"])
                kept.append(event)
        times = [e[time_field] for e in batch]
        if times:
            max_seen = max([max_seen or times[0]] + times)
        watermarks.append(max(watermarks[-1], max_seen - lateness_ms) if max_seen is not None else 0)
    final_watermark = max_seen - lateness_ms  # what the last (no-data) batch runs with
    return kept, dropped, final_watermark


def user_events(seed: int, batches: int = 8, per_batch: int = 12, users=("ann", "bob", "cy")):
    """Clicks of a few users: mostly in order, some late within a minute, and from the
    fifth batch on some far too late (half an hour behind)."""
    rng = random.Random(seed)
    out, clock, n = [], BASE_MS, 0
    for b in range(batches):
        batch = []
        for _ in range(per_batch):
            clock += rng.randint(2_000, 25_000)
            kind = rng.random()
            t = clock
            if kind < 0.15:
                t = clock - rng.randint(5_000, 60_000)  # late, but within the lateness
            elif kind < 0.22 and b >= 4:
                t = clock - rng.randint(30 * MINUTE, 40 * MINUTE)  # too late
            n += 1
            batch.append({"event_id": f"e{n}", "user_id": rng.choice(users), "ts_ms": t})
        if b == 3:
            batch.extend(dict(e) for e in out[2][:2])  # delivered twice
        out.append(batch)
    return out
