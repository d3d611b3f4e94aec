"""Change events in Avro (`headwater cdc ... --schema-registry URL`): the same envelope as the
JSON events, written in Confluent's wire format with a schema derived from the table's columns
and registered under ``<topic>-value`` (and the primary key's record under ``<topic>-key``).

The value is an ``Envelope`` record: ``before`` and ``after`` are a union of null and the
table's ``Value`` record, ``source`` a ``headwater.cdc.Source`` record, ``op`` and ``ts_ms``.
In ``Value`` the primary key's columns have their type and every other column is a union
with null (default null): a delete under PostgreSQL's default replica identity carries only
the key, and events written before a column was added read as null in it. A table's schema
change (PostgreSQL sends it before the table's next change) registers a new version; one the
subject's compatibility refuses stops the connector (`CdcError`) before its event is sent, so
the source position never passes it.
"""
from __future__ import annotations

import re
import time
from typing import Any, NamedTuple

from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField

from headwater.schemas.avro_records import AvroRecords, registry_client

from . import CdcError
from .avro_columns import AvroColumn, check_names

_NOT_IN_NAME = re.compile(r"[^A-Za-z0-9_.]")
_OPTIONAL_LONG = {"type": ["null", "long"], "default": None}
SOURCE_SCHEMA = {"type": "record", "name": "Source", "namespace": "headwater.cdc", "fields": [
    {"name": "connector", "type": "string"}, {"name": "db", "type": "string"},
    {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
    {"name": "lsn", **_OPTIONAL_LONG}, {"name": "txId", **_OPTIONAL_LONG}, {"name": "ts_ms", **_OPTIONAL_LONG},
    {"name": "snapshot", "type": "string"}]}


def namespace(topic: str) -> str:
    """The topic's name as an Avro namespace: each dot-separated part a valid Avro name."""
    return ".".join(("_" + part if part[:1].isdigit() else part) or "_"
                    for part in _NOT_IN_NAME.sub("_", topic).split("."))


def _field(column: AvroColumn, keyed: bool) -> dict:
    return {"name": column.name, "type": column.type} if keyed else \
        {"name": column.name, "type": ["null", column.type], "default": None}


def value_schema(topic: str, columns: list[AvroColumn], key: list[str]) -> dict:
    row = {"type": "record", "name": "Value", "fields": [_field(c, c.name in key) for c in columns]}
    return {"type": "record", "name": "Envelope", "namespace": namespace(topic), "fields": [
        {"name": "before", "type": ["null", row], "default": None},
        {"name": "after", "type": ["null", "Value"], "default": None},
        {"name": "source", "type": SOURCE_SCHEMA}, {"name": "op", "type": "string"}, {"name": "ts_ms", "type": "long"}]}


def key_schema(topic: str, columns: list[AvroColumn], key: list[str]) -> dict:
    by_name = {c.name: c for c in columns}
    return {"type": "record", "name": "Key", "namespace": namespace(topic),
            "fields": [_field(by_name[name], True) for name in key]}


class _TableSchemas(NamedTuple):
    table: str
    values: AvroRecords
    keys: AvroRecords | None


class AvroEvents:
    """The `envelope.EventFormat` of Avro events, their schemas in the registry at `url`."""
    typed = True  # rows hold Avro values: the connector converts with `avro_columns`

    def __init__(self, url: str, registry_config: dict[str, str] | None = None):
        self.client = registry_client(url, registry_config)
        self._tables: dict[str, _TableSchemas] = {}  # topic -> its table's current schemas
        self._records: dict[tuple[str, str, str], AvroRecords] = {}  # one serializer per schema, kept

    def define(self, table: str, topic: str, columns: list[AvroColumn], key: list[str]) -> None:
        """The columns of `table` (schema.name) now: its events from here on have their schema."""
        check_names(table, columns)
        keys = self._serializer(topic, key_schema(topic, columns, key), MessageField.KEY) if key else None
        self._tables[topic] = _TableSchemas(table, self._serializer(topic, value_schema(topic, columns, key),
                                                                    MessageField.VALUE), keys)

    def _serializer(self, topic: str, schema: dict, field: str) -> AvroRecords:
        at = (topic, field, repr(schema))
        if at not in self._records:
            self._records[at] = AvroRecords(self.client, topic, schema, field)
        return self._records[at]

    def key(self, topic: str, key_columns: list[str], row: dict | None) -> bytes | None:
        schemas = self._tables[topic]
        if schemas.keys is None or row is None:
            return None
        return _encode(schemas.table, schemas.keys, {name: row[name] for name in key_columns})

    def value(self, topic: str, op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
        schemas = self._tables[topic]
        return _encode(schemas.table, schemas.values, {"before": before, "after": after, "source": source, "op": op,
                                                       "ts_ms": int(time.time() * 1000)})


def _encode(table: str, records: AvroRecords, record: dict[str, Any]) -> bytes:
    try:
        return records.encode(record)
    except SchemaRegistryError as exc:
        raise CdcError(f"table {table}: the schema registry refuses the schema of its change events under "
                       f"{records.subject}: {exc.error_message} (error {exc.error_code})") from None
    except (ValueError, TypeError) as exc:  # fastavro: a value its column's Avro type does not hold
        raise CdcError(f"table {table}: a change does not fit its Avro schema ({records.subject}): {exc}") from None
