"""How the relay writes a stored row (`COLUMNS`) to its topic and `TopicSource` reads it back:
JSON (the default), or Avro with its schema in a schema registry (Confluent's wire format:
what confluent-kafka's AvroDeserializer, Spark's from_avro or a Java consumer read). The row
is the event as stored: its body stays JSON text, personal fields sealed, old versions old,
so one schema serves every event type of the topic."""
from __future__ import annotations

import json
from typing import Protocol

from headwater.eventsourcing.events import COLUMNS
from headwater.schemas.avro_records import AvroRecords, registry_client

FIELDS = [c.strip() for c in COLUMNS.split(",")]
AVRO_TYPES = {"position": "long", "stream_id": "string", "version": "long", "event_id": "string",
              "type": "string", "schema_version": "int", "data": "string", "metadata": "string",
              "recorded_at": "double"}
ROW_SCHEMA = {"type": "record", "name": "StoredEvent", "namespace": "headwater.eventsourcing",
              "doc": "An event as the event store keeps it; data and metadata are JSON text",
              "fields": [{"name": f, "type": AVRO_TYPES[f]} for f in FIELDS]}


class RowFormat(Protocol):
    def encode(self, row: tuple) -> bytes: ...

    def decode(self, value: bytes) -> tuple: ...


def encode_row(row: tuple) -> bytes:
    """A stored row as JSON."""
    return json.dumps(dict(zip(FIELDS, row))).encode()


def decode_value(value: bytes) -> tuple:
    record = json.loads(value)
    return tuple(record[f] for f in FIELDS)


class JsonRows:
    encode = staticmethod(encode_row)
    decode = staticmethod(decode_value)


class AvroRows:
    """ROW_SCHEMA, registered (once, by the first encode) under `<topic>-value` in the registry at `url`."""

    def __init__(self, url: str, topic: str, registry_config: dict[str, str] | None = None):
        """``registry_config``: more of the registry client's properties (basic.auth.user.info, ssl.ca.location)."""
        self.records = AvroRecords(registry_client(url, registry_config), topic, ROW_SCHEMA)

    def encode(self, row: tuple) -> bytes:
        record = dict(zip(FIELDS, row))
        record["recorded_at"] = float(record["recorded_at"])
        return self.records.encode(record)

    def decode(self, value: bytes) -> tuple:
        record = self.records.decode(value)
        return tuple(record[f] for f in FIELDS)


def row_format(topic: str, schema_registry: str | None, registry_config: dict[str, str] | None = None) -> RowFormat:
    return AvroRows(schema_registry, topic, registry_config) if schema_registry else JsonRows()
