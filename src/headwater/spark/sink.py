"""The `headwater` sink: rows with key, value, topic, partition, headers become records.

At-least-once, like Spark's Kafka sink: a batch that is retried is produced again.
For exactly-once output to a topic see headwater.pipelines.exactly_once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from confluent_kafka import Producer
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from headwater.spark.options import OptionError, client_config

FLUSH_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class WriterOptions:
    client: dict
    topic: str | None


@dataclass
class Written(WriterCommitMessage):
    records: int


def writer_options(options, schema: StructType) -> WriterOptions:
    """Check the input columns as Spark's Kafka sink does, with its wording of the rules."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise OptionError("required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise OptionError(f"{name} attribute type must be a string or binary, got {fields[name].simpleString()}")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise OptionError(f"topic attribute type must be a string, got {fields['topic'].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise OptionError(f"partition attribute type must be an int, got {fields['partition'].simpleString()}")
    topic = options.get("topic")
    if topic is None and "topic" not in fields:
        raise OptionError("topic option required when no 'topic' attribute is present")
    return WriterOptions(client_config(options), topic)


def produce(options: WriterOptions, batches: Iterator[pa.RecordBatch]) -> Written:
    producer = Producer({"acks": "all", "linger.ms": 5, **options.client})
    failures: list[str] = []

    def delivered(err, msg):
        if err is not None:
            failures.append(f"{msg.topic()}: {err.str()}")

    count = 0
    for batch in batches:
        columns = batch.to_pydict()
        n = batch.num_rows
        keys = _bytes(columns.get("key", [None] * n))
        values = _bytes(columns["value"])
        topics = [options.topic] * n if options.topic else columns["topic"]
        partitions = columns.get("partition", [None] * n)
        headers = columns.get("headers", [None] * n)
        for i in range(n):
            if topics[i] is None:
                raise OptionError("null topic in a row (and no 'topic' option)")
            extra = {}
            if partitions[i] is not None:
                extra["partition"] = partitions[i]
            if headers[i]:
                extra["headers"] = [(h["key"], h["value"]) for h in headers[i]]
            while True:
                try:
                    producer.produce(topics[i], values[i], keys[i], on_delivery=delivered, **extra)
                    break
                except BufferError:  # local queue full: let deliveries drain
                    producer.poll(0.1)
            producer.poll(0)
            count += 1
    if producer.flush(FLUSH_TIMEOUT_S) > 0:
        failures.append(f"records still undelivered after {FLUSH_TIMEOUT_S:.0f} s")
    if failures:
        raise RuntimeError(f"{len(failures)} records failed: {failures[0]}")
    return Written(count)


def _bytes(column: list) -> list:
    return [v.encode() if isinstance(v, str) else v for v in column]


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: WriterOptions):
        self.options = options

    def write(self, iterator):
        return produce(self.options, iterator)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: WriterOptions):
        self.options = options

    def write(self, iterator):
        return produce(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
