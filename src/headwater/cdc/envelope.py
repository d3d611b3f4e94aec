"""Debezium-shaped change events: key = primary key as JSON, value = the change envelope.

value = {"before", "after", "source": {connector, db, schema, table, lsn, txId, ts_ms,
snapshot}, "op": c|u|d|r|t, "ts_ms"}. A delete is followed by a tombstone (same key, null
value) so log compaction can drop the key. An update that changes the primary key becomes a
delete (+ tombstone) of the old key and a create of the new one, so each key's history
stays on its own partition and compaction stays right.
"""
from __future__ import annotations

from dataclasses import dataclass
import time
from typing import Any, Protocol

import orjson

# What an unchanged TOASTed column holds in `after`: PostgreSQL did not send the value and we
# never invent one. Consumers keep the value they already have for this column.
UNAVAILABLE = "__headwater_unavailable_value"


@dataclass
class Source:
    connector: str  # "postgresql" | "sqlite"
    db: str
    schema: str
    table: str
    lsn: int | None
    tx_id: int | None
    ts_ms: int | None  # commit time of the change in the source database
    snapshot: str = "false"  # "true" for snapshot reads, "last" on the snapshot's last row

    def as_json(self) -> dict:
        return {"connector": self.connector, "db": self.db, "schema": self.schema,
                "table": self.table, "lsn": self.lsn, "txId": self.tx_id,
                "ts_ms": self.ts_ms, "snapshot": self.snapshot}


@dataclass(slots=True)
class ChangeEvent:
    topic: str
    key: bytes | None
    value: bytes | None  # None = tombstone


def topic_name(prefix: str, schema: str, table: str) -> str:
    return f"{prefix}.{schema}.{table}"


_dumps = orjson.dumps  # compact UTF-8 JSON, as json.dumps(separators=(",", ":"), ensure_ascii=False)


def event_key(key_columns: list[str], row: dict | None) -> bytes | None:
    """The key of a row's events: its primary key as JSON (None without one)."""
    if not key_columns or row is None:
        return None
    if len(key_columns) == 1:  # the usual primary key, without a comprehension
        name = key_columns[0]
        return _dumps({name: row.get(name)})
    return _dumps({name: row.get(name) for name in key_columns})


def _value(op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
    return _dumps({"before": before, "after": after, "source": source, "op": op,
                   "ts_ms": int(time.time() * 1000)})


class EventFormat(Protocol):
    """How a change event's key and value are written: JSON (`JSON`) or Avro (`avro_events`)."""
    typed: bool  # whether rows hold typed values (Avro's) rather than JSON's

    def define(self, table: str, topic: str, columns: list[Any], key: list[str]) -> None:
        """A table's columns (`avro_columns.AvroColumn`s), before its first event and after each schema change."""

    def key(self, topic: str, key_columns: list[str], row: dict | None) -> bytes | None: ...

    def value(self, topic: str, op: str, before: dict | None, after: dict | None, source: dict) -> bytes: ...


class JsonEvents:
    """Key and value as JSON: the default, schemaless."""
    typed = False

    def define(self, table: str, topic: str, columns: list[Any], key: list[str]) -> None:
        pass

    def key(self, topic: str, key_columns: list[str], row: dict | None) -> bytes | None:
        return event_key(key_columns, row)

    def value(self, topic: str, op: str, before: dict | None, after: dict | None, source: dict) -> bytes:
        return _value(op, before, after, source)


JSON = JsonEvents()


def row_events(topic: str, key_columns: list[str], op: str, before: dict | None, after: dict | None,
               source: dict, events: EventFormat = JSON) -> list[ChangeEvent]:
    """The events for one row change; op is c, u, d or r; `source` is a `Source.as_json()`."""
    if op == "d":
        key = events.key(topic, key_columns, before)
        return [ChangeEvent(topic, key, events.value(topic, "d", before, None, source)),
                ChangeEvent(topic, key, None)]
    key = events.key(topic, key_columns, after)
    if op == "u" and before is not None:
        old_key = events.key(topic, key_columns, before)
        if old_key != key:
            return [ChangeEvent(topic, old_key, events.value(topic, "d", before, None, source)),
                    ChangeEvent(topic, old_key, None),
                    ChangeEvent(topic, key, events.value(topic, "c", None, after, source))]
    return [ChangeEvent(topic, key, events.value(topic, op, before, after, source))]


def create_template(source: dict) -> bytes:
    """The value of every insert with this `source` block but its LSN (one table, one
    transaction), as a %-template of the row's JSON, the LSN and ts_ms: the source block
    is encoded once, not per event. `create_value` fills it in, to the very bytes `row_events` gives."""
    names = list(source)
    at = names.index("lsn")  # a Source.as_json(): fields before and after the LSN
    head = _dumps({name: source[name] for name in names[:at]})[:-1]
    tail = _dumps({name: source[name] for name in names[at + 1:]})[1:]
    return (b'{"before":null,"after":%b,"source":' + head.replace(b"%", b"%%") + b',"lsn":%d,'
            + tail.replace(b"%", b"%%") + b',"op":"c","ts_ms":%d}')


def create_value(template: bytes, after: dict, lsn: int, ts_ms: int) -> bytes:
    """The value of an insert (op c) from its table's `create_template`, processed at `ts_ms`
    (Unix milliseconds); its key is `event_key`'s."""
    return template % (_dumps(after), lsn, ts_ms)


def truncate_event(topic: str, source: dict, events: EventFormat = JSON) -> ChangeEvent:
    """A truncate has no row and so no key."""
    return ChangeEvent(topic, None, events.value(topic, "t", None, None, source))
