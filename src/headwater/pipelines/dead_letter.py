"""Bad input records: counted and set aside in a dead-letter topic, never silently dropped.

A pipeline's input topics hold JSON objects of a known shape (`Shape`). A record that
is not JSON, not an object, lacks a field or has one of the wrong type would otherwise
become a row of nulls that the pipeline drops without a word. Instead `checked` gives
every record the reason it is bad (null when it is good); the pipeline runs on the good
ones, and the bad ones ride along in the same query (the `DEAD_LETTER` column of rows
unioned with its output) to `WithDeadLetters`, which writes them, key and value as they
were, with the reason and where they came from in headers, to a dead-letter topic,
exactly once, and hands the rest to the pipeline's sink. The query keeps running.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewTopic
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from headwater.pipelines.exactly_once import TopicPerBatch

REASON = "reason"  # the column `checked` adds
DEAD_LETTER = "dead_letter"  # the column of bad records in a pipeline's output
# Headers of a dead letter: message (the reason), topic, partition, offset. KIP-1191's, as
# share groups' dead letters, so `headwater groups redrive` sends them back where they came from.
HEADER_PREFIX = "__dlq.errors."
_TYPES = {"string": (str,), "long": (int,), "double": (int, float), "boolean": (bool,)}
_JSON_TYPES = {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "an array",
               dict: "an object", type(None): "null"}
_LONG = range(-2 ** 63, 2 ** 63)


def fields(schema: str) -> dict[str, str]:
    """A DDL schema of simple types ("event_id string, ts_ms long") as name -> type."""
    return dict(part.split() for part in schema.split(","))


@dataclass(frozen=True)
class Shape:
    """What a topic's records must be: values that are JSON objects with every one of
    `fields` (name -> string, long, double or boolean) present and of its type; other
    fields are allowed. A changelog's records need a key, and a null value (a deletion)
    is good."""
    fields: dict[str, str]
    changelog: bool = False

    def reason(self, key: bytes | None, value: bytes | None) -> str | None:
        """Why the record is bad, or None."""
        if self.changelog:
            if key is None:
                return "no key"
            try:
                key.decode()
            except UnicodeDecodeError:
                return "key is not UTF-8"
        if value is None:
            return None if self.changelog else "no value"
        try:
            row = json.loads(value.decode())  # UTF-8, as Spark reads it (json.loads would guess UTF-16 too)
        except ValueError as exc:  # also bytes that are not UTF-8
            return f"not JSON: {exc}"
        if not isinstance(row, dict):
            return f"not a JSON object but {_JSON_TYPES[type(row)]}"
        for name, kind in self.fields.items():
            found = row.get(name)
            if found is None:
                return f"missing field {name}"
            if isinstance(found, bool) != (kind == "boolean") or not isinstance(found, _TYPES[kind]):
                return f"field {name} is {_JSON_TYPES[type(found)]}, not a {kind}"
            if kind == "long" and found not in _LONG:
                return f"field {name} is out of the range of a long"
        return None


def checked(records: DataFrame, shapes: dict[str, Shape]) -> DataFrame:
    """The `headwater` source's records (of the topics in `shapes`) with a `reason` column."""
    reason = F.udf(lambda topic, key, value: shapes[topic].reason(key, value), "string")
    return records.withColumn(REASON, reason("topic", "key", "value"))


def bad_records(checked_records: DataFrame) -> DataFrame:
    """The bad records of `checked`, as one `dead_letter` struct column."""
    return (checked_records.where(F.col(REASON).isNotNull())
            .select(F.struct("topic", "partition", "offset", "key", "value", REASON).alias(DEAD_LETTER)))


class DeadLetterTopic(TopicPerBatch):
    """Bad records (the fields of `DEAD_LETTER`) to `topic`, exactly once, created with one
    partition when missing: key and value as read, the reason and the record's topic,
    partition and offset as headers (`HEADER_PREFIX`)."""

    def __init__(self, client: dict, topic: str):
        super().__init__(client, topic, "key")
        self.created = False

    def record(self, row: Row) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes]]]:
        origin = {"message": row.reason, "topic": row.topic, "partition": row.partition, "offset": row.offset}
        return (None if row.key is None else bytes(row.key), None if row.value is None else bytes(row.value),
                [(HEADER_PREFIX + name, str(value).encode()) for name, value in origin.items()])

    def partitions(self) -> list[int]:
        if not self.created:  # at the first bad record, so a clean stream leaves no topic behind
            admin = AdminClient(self.client)  # kept until the result: its handle must outlive the request
            try:
                admin.create_topics([NewTopic(self.topic, 1)])[self.topic].result(30)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"cannot create the dead-letter topic {self.topic!r}: "
                                       f"{exc.args[0].str()}") from None
            self.created = True
        return super().partitions()


class WithDeadLetters:
    """A foreachBatch function for a pipeline's output with its bad records unioned in:
    the bad ones to the dead-letter topic, the others (without the `dead_letter` column)
    to the pipeline's own sink."""

    def __init__(self, sink: Callable[[DataFrame, int], None], dead_letters: DeadLetterTopic):
        self.sink, self.dead_letters = sink, dead_letters

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        batch.persist()  # the micro-batch is computed once, for both writers
        try:
            bad = F.col(DEAD_LETTER).isNotNull()
            self.dead_letters(batch.where(bad).select(f"{DEAD_LETTER}.*"), batch_id)
            self.sink(batch.where(~bad).drop(DEAD_LETTER), batch_id)
        finally:
            batch.unpersist()
