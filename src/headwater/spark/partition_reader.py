"""Reading one offset range of one partition into Arrow record batches (runs on executors):
fetch requests to the partition's leader (fetcher), each response's record batches walked
straight into columns (record_columns), one Arrow batch per fetch."""

from __future__ import annotations

import json
import time
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from headwater.protocol.errors import ErrorCode
from headwater.spark.cluster import Cluster
from headwater.spark.fetcher import Fetcher
from headwater.spark.record_columns import FetchedRecords

STALL_TIMEOUT_S = 60.0
NO_PROGRESS_PAUSE_S = 0.01  # before asking again, when a fetch below the readable end brought nothing


class DataLossError(RuntimeError):
    pass


class OffsetRange(InputPartition):
    """Records [start, end) of one topic-partition: one Spark input partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def data_loss_message(rng: OffsetRange, first_lost: int, log_start: int) -> str:
    return (f"partition {rng.topic}-{rng.partition}: offsets {first_lost}..{log_start - 1} are no longer in "
            f"the log (log start offset is {log_start}): records were lost to retention or deletion. "
            f"Set failOnDataLoss=false to skip them.")


# Spark reuses Python workers between tasks: a fetcher kept per worker spares each task
# its connections, login and leader look-up. Between tasks no request is in flight.
_idle: dict[str, Fetcher] = {}


def read_range(client: dict, rng: OffsetRange, include_headers: bool, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """Yield the records of `rng` in offset order. Offsets missing inside the range
    (compacted away, or transaction markers) are normal; a range that starts below the
    log start offset is data loss."""
    if rng.start >= rng.end:
        return
    key = json.dumps(client, sort_keys=True)
    fetcher = _idle.pop(key, None) or Fetcher(client)
    try:
        yield from _batches(fetcher, client, rng, include_headers, fail_on_data_loss)
    except BaseException:  # an error, or Spark closing the generator early
        fetcher.close()
        raise
    if not fetcher.idle or _idle.setdefault(key, fetcher) is not fetcher:  # or another reader checked one in
        fetcher.close()


def _batches(fetcher: Fetcher, client: dict, rng: OffsetRange, include_headers: bool,
             fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    position = rng.start
    idle_since = time.monotonic()
    while position < rng.end:
        fetched = fetcher.fetch(rng.topic, rng.partition, position)
        if fetched.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            position = _after_refusal(client, rng, position, fail_on_data_loss)
            continue
        aborted = ([(a.producer_id, a.first_offset) for a in fetched.aborted_transactions or ()]
                   if fetcher.isolation_level else None)
        records = FetchedRecords(fetched.records or b"", include_headers, aborted)
        if position < records.next_offset < rng.end:
            # The broker reads the next records while this batch is built and handed to Spark.
            fetcher.fetch_ahead(rng.topic, rng.partition, records.next_offset)
        batch = records.columns(rng.topic, rng.partition, position, rng.end)
        if batch is not None:
            idle_since = time.monotonic()
            yield batch
        if records.next_offset > position:
            position = records.next_offset
        elif position >= _readable_end(fetcher, fetched):
            # At the end of what may be read: whatever lies before rng.end is gone (a
            # compacted tail, or control records), so the range is complete.
            position = rng.end
        elif time.monotonic() - idle_since > STALL_TIMEOUT_S:
            raise RuntimeError(f"reading {rng.topic}-{rng.partition}: no record for {STALL_TIMEOUT_S:.0f} s "
                               f"at offset {position}, below the planned end {rng.end}")
        else:
            time.sleep(NO_PROGRESS_PAUSE_S)


def _readable_end(fetcher: Fetcher, fetched) -> int:
    """Where a fetch can read up to: the last stable offset under read_committed, else the high watermark."""
    if fetcher.isolation_level and fetched.last_stable_offset >= 0:
        return fetched.last_stable_offset
    return fetched.high_watermark


def _after_refusal(client: dict, rng: OffsetRange, position: int, fail_on_data_loss: bool) -> int:
    """Where to go on after the broker refused to fetch from `position`. The log start
    offset is looked up only then, not as a round trip per task."""
    cluster = Cluster(client)
    try:
        log_start, _ = cluster.watermarks((rng.topic, rng.partition))
    finally:
        cluster.close()
    if log_start <= position:  # past the end: the log was truncated
        raise RuntimeError(f"reading {rng.topic}-{rng.partition}: offset {position} is past the end of the log")
    if fail_on_data_loss:
        raise DataLossError(data_loss_message(rng, position, log_start))
    return log_start
