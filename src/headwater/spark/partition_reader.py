"""Reading one offset range of one partition into Arrow record batches (runs on executors)."""

from __future__ import annotations

import gc
import json
import time
from contextlib import contextmanager
from itertools import chain
from typing import Iterator

import numpy as np
import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pyspark.sql.datasource import InputPartition

from headwater.spark.cluster import consumer

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
COLUMNS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]
ROWS_PER_BATCH = 10_000
STALL_TIMEOUT_S = 60.0
# consume(n) waits for n messages or this long; n never exceeds what the range still
# holds, so the wait only happens when compaction left gaps before the range's end.
POLL_TIMEOUT_S = 0.2

OFFSET = [name for name, _ in COLUMNS].index("offset")


class DataLossError(RuntimeError):
    pass


class OffsetRange(InputPartition):
    """Records [start, end) of one topic-partition: one Spark input partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __repr__(self) -> str:
        return f"OffsetRange({self.topic}-{self.partition} [{self.start}, {self.end}))"


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = list(COLUMNS) + ([("headers", HEADERS_TYPE)] if include_headers else [])
    return pa.schema(fields)


def reader_config(client: dict) -> dict:
    # Defaults for reading a bounded range as fast as possible (the user's kafka.* options
    # override them):
    # - librdkafka pauses fetching for fetch.queue.backoff.ms (default 1 s) whenever its
    #   prefetch queue is full; a task reads as fast as it can, so resume almost at once
    #   (the pause outlives unassign(): the next task's first fetch waits for it too);
    # - it prefetches queued.min.messages (default 100,000) ahead, records past the
    #   range's end that are parsed and thrown away: one batch ahead is enough;
    # - a fetch that reached the end of the log waits fetch.wait.max.ms (default 500) at
    #   the broker, and holds up the next task's requests on the same connection.
    # The end-of-partition event is how a range with a compacted tail ends, so it is always on.
    return {"fetch.queue.backoff.ms": 1, "queued.min.messages": ROWS_PER_BATCH, "fetch.wait.max.ms": 10,
            **client, "enable.partition.eof": True}


def data_loss_message(rng: OffsetRange, first_lost: int, log_start: int) -> str:
    return (f"partition {rng.topic}-{rng.partition}: offsets {first_lost}..{log_start - 1} are no longer in "
            f"the log (log start offset is {log_start}): records were lost to retention or deletion. "
            f"Set failOnDataLoss=false to skip them.")


class _OutOfRange(Exception):
    """The broker refused to fetch from `position`: it is outside the log."""

    def __init__(self, position: int):
        self.position = position


# Spark reuses Python workers between tasks: a consumer kept per worker spares each task
# the connection and metadata round trips. Between tasks it has no assignment, so it
# fetches nothing in the background and no stale fetch error reaches the next task.
_idle: dict[str, Consumer] = {}


def read_range(client: dict, rng: OffsetRange, include_headers: bool, fail_on_data_loss: bool) -> Iterator[pa.RecordBatch]:
    """Yield the records of `rng` in offset order. Offsets missing inside the range
    (compacted away, or transaction markers) are normal; a range that starts below the
    log start offset is data loss."""
    if rng.start >= rng.end:
        return
    key = json.dumps(client, sort_keys=True)
    kafka = _idle.pop(key, None) or consumer(reader_config(client))
    try:
        start = rng.start
        while start < rng.end:
            kafka.assign([TopicPartition(rng.topic, rng.partition, start)])
            try:
                yield from _batches(kafka, rng, start, include_headers)
                start = rng.end
            except _OutOfRange as refused:
                # Looked up only when the broker refuses an offset, not as a round trip per task.
                log_start, _ = kafka.get_watermark_offsets(TopicPartition(rng.topic, rng.partition), timeout=30)
                if log_start <= refused.position:  # past the end: the log was truncated
                    raise RuntimeError(f"reading {rng.topic}-{rng.partition}: offset {refused.position} is past "
                                       f"the end of the log") from None
                if fail_on_data_loss:
                    raise DataLossError(data_loss_message(rng, refused.position, log_start)) from None
                start = log_start
        kafka.unassign()
    except BaseException:  # an error, or Spark closing the generator early: state unknown
        kafka.close()
        raise
    if _idle.setdefault(key, kafka) is not kafka:  # another reader here checked one in meanwhile
        kafka.close()


def _batches(kafka, rng: OffsetRange, start: int, include_headers: bool) -> Iterator[pa.RecordBatch]:
    schema = arrow_schema(include_headers)
    position = start
    idle_since = time.monotonic()
    while position < rng.end:
        with collector_paused():
            messages = kafka.consume(min(ROWS_PER_BATCH, rng.end - position), timeout=POLL_TIMEOUT_S)
            if any(map(Message.error, messages)):
                position = _end_of_partition(messages, rng, position)
                messages = [m for m in messages if m.error() is None]
            batch = to_arrow(messages, schema, include_headers) if messages else None
        if batch is None:
            if time.monotonic() - idle_since > STALL_TIMEOUT_S:
                raise RuntimeError(f"reading {rng.topic}-{rng.partition}: no record for {STALL_TIMEOUT_S:.0f} s "
                                   f"at offset {position}, below the planned end {rng.end}")
            continue
        offsets = batch.column(OFFSET)
        inside = int(np.searchsorted(offsets.to_numpy(), rng.end))
        position = rng.end if inside < len(offsets) else max(position, offsets[-1].as_py() + 1)
        if inside:
            idle_since = time.monotonic()
            yield batch.slice(0, inside)


@contextmanager
def collector_paused():
    """Thousands of short-lived Message objects a batch make the cyclic garbage
    collector run dozens of times per batch, over every object of the Spark worker;
    they hold no cycles and are freed by reference counting, so it may rest."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _end_of_partition(messages, rng: OffsetRange, position: int) -> int:
    """The position after the error events among `messages`: end-of-partition moves it to
    the high watermark; an offset outside the log is _OutOfRange; any other error fails
    the read."""
    for m in messages:
        error = m.error()
        if error is None:
            continue
        if error.code() == KafkaError._AUTO_OFFSET_RESET:  # auto.offset.reset is "error"
            raise _OutOfRange(position)
        if error.code() != KafkaError._PARTITION_EOF:
            raise RuntimeError(f"reading {rng.topic}-{rng.partition} at offset {position}: {error.str()}")
        # At the high watermark: whatever lies before rng.end is gone (compacted
        # tail, or control records), so the range is complete.
        position = max(position, m.offset())
    return position


def to_arrow(messages: list[Message], schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    """Columns built with C-level loops (map over the Message methods), no Python
    bytecode per record except for headers."""
    n = len(messages)
    # (type, milliseconds) pairs, flattened into one int64 vector.
    stamps = np.fromiter(chain.from_iterable(map(Message.timestamp, messages)), np.int64, 2 * n).reshape(n, 2)
    kinds = stamps[:, 0]
    columns = [
        pa.array(list(map(Message.key, messages)), pa.binary()),
        pa.array(list(map(Message.value, messages)), pa.binary()),
        pa.repeat(pa.scalar(messages[0].topic(), pa.string()), n),
        pa.repeat(pa.scalar(messages[0].partition(), pa.int32()), n),
        pa.array(_offsets(messages)),
        # A record without a timestamp (type 0): null, as in Spark's Kafka source.
        pa.array(stamps[:, 1] * 1000, pa.timestamp("us", tz="UTC"), mask=kinds == 0),
        # librdkafka numbers timestamp types 0 (none), 1 (create), 2 (log append); Spark's
        # Kafka source reports -1, 0 and 1.
        pa.array((kinds - 1).astype(np.int32)),
    ]
    if include_headers:
        columns.append(pa.array(
            # No headers is null, not an empty list, as in Spark's Kafka source.
            [[{"key": k, "value": v} for k, v in m.headers()] if m.headers() else None for m in messages],
            HEADERS_TYPE))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _offsets(messages: list[Message]) -> np.ndarray:
    first, n = messages[0].offset(), len(messages)
    if messages[-1].offset() - first == n - 1:  # no gap (offsets only increase): no call per record
        return np.arange(first, first + n, dtype=np.int64)
    return np.fromiter(map(Message.offset, messages), np.int64, n)
