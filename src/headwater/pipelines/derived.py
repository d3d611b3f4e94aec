"""Derived systems kept in sync from a change stream: a full-text search index and a
cache, fed from a CDC topic (Debezium-shaped envelopes of `headwater.cdc`).

The chapter's point: an application that writes the database and then the index (a
dual write) leaves them disagreeing when two writers interleave; a derived system that
applies the database's own change log, in log order, ends up equal to the database.

Each store is a SQLite file holding, in the same transaction as the data, the next
offset to apply per (topic, partition). A micro-batch's records are applied in offset
order and a record below that offset is skipped, so a replayed micro-batch, a restart
from the checkpoint, or a new query over an existing store changes nothing twice
(exactly once), and deleting the file and the checkpoint rebuilds the store from the
log (from offset 0; a compacted topic keeps each row's latest change).

- `SearchIndex`: SQLite FTS5. Chosen over tantivy (its Python package is a good
  engine too) because FTS5 ships in Python's sqlite3 (no dependency), and its writes
  commit in one transaction with the offsets, which is what makes exactly-once a
  single commit; with tantivy the offsets would have to ride in the index's own commit.
- `Cache`: a key-value table (key = the row's primary key as JSON, value = the row as
  JSON). A team would point this at Redis or memcached: with the offsets kept in the
  target (a hash next to the keys, written in the same MULTI/EXEC) or with writes that
  carry the record's offset so an older one never overwrites a newer one.

A record that is not a change event (not JSON, no op) is counted in the store's
`rejects` table with the reason and skipped; the query keeps running.
"""
from __future__ import annotations

import json
import sqlite3
from typing import Iterator

from pyspark.sql import DataFrame

from headwater.cdc.envelope import UNAVAILABLE

OFFSETS = """
CREATE TABLE IF NOT EXISTS applied (topic TEXT, partition INTEGER, next_offset INTEGER,
                                    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS rejects (topic TEXT, partition INTEGER, offset INTEGER, reason TEXT,
                                    PRIMARY KEY (topic, partition, offset));
"""


class BadChange(ValueError):
    pass


def change(value: bytes | None) -> tuple[str, dict | None]:
    """('upsert', row after) or ('delete', None) for a change event or a tombstone."""
    if value is None:
        return "delete", None
    try:
        event = json.loads(value.decode())
    except ValueError as exc:
        raise BadChange(f"not JSON: {exc}") from None
    op = event.get("op") if isinstance(event, dict) else None
    if op == "d":
        return "delete", None
    if op in ("c", "u", "r") and isinstance(event.get("after"), dict):
        return "upsert", event["after"]
    raise BadChange(f"not a change event (op {op!r})")


class DerivedStore:
    """A foreachBatch function applying a CDC topic's records to a SQLite store, once
    each, in offset order. Subclasses create their tables and apply one change."""

    schema: str

    def __init__(self, path: str):
        self.path = str(path)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        records = sorted(batch.select("topic", "partition", "offset", "key", "value").collect(),
                         key=lambda r: (r.topic, r.partition, r.offset))
        db = sqlite3.connect(self.path)
        try:
            with db:  # the changes and the offsets, or neither
                db.executescript(OFFSETS + self.schema)
                applied = {(t, p): o for t, p, o in db.execute("SELECT * FROM applied")}
                for r in records:
                    if r.offset < applied.get((r.topic, r.partition), 0):
                        continue  # applied before: a replay
                    self._apply(db, r)
                    applied[(r.topic, r.partition)] = r.offset + 1
                db.executemany("INSERT OR REPLACE INTO applied VALUES (?, ?, ?)",
                               [(t, p, o) for (t, p), o in applied.items()])
        finally:
            db.close()

    def _apply(self, db, r) -> None:
        try:
            if r.key is None:
                raise BadChange("no key")
            what, row = change(None if r.value is None else bytes(r.value))
        except BadChange as exc:
            db.execute("INSERT OR IGNORE INTO rejects VALUES (?, ?, ?, ?)", (r.topic, r.partition, r.offset, str(exc)))
            return
        key = bytes(r.key).decode()
        if what == "delete":
            self.delete(db, key)
        else:
            self.upsert(db, key, row)

    def upsert(self, db, key: str, row: dict) -> None:
        raise NotImplementedError

    def delete(self, db, key: str) -> None:
        raise NotImplementedError


class SearchIndex(DerivedStore):
    """Rows' `fields` (text columns) in an FTS5 table `search`, whose rowid maps to the
    row's key in `search_keys`. `search(path, text)` queries it."""

    def __init__(self, path: str, fields: list[str]):
        super().__init__(path)
        self.fields = list(fields)
        self.schema = (f"CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5({', '.join(self.fields)}, "
                       "tokenize = 'unicode61 remove_diacritics 0');"
                       "CREATE TABLE IF NOT EXISTS search_keys (docid INTEGER PRIMARY KEY, key TEXT UNIQUE);")

    def upsert(self, db, key: str, row: dict) -> None:
        # Insert first: the write lock is then held, so a concurrent writer cannot add the key in between.
        db.execute("INSERT OR IGNORE INTO search_keys (key) VALUES (?)", (key,))
        docid, = db.execute("SELECT docid FROM search_keys WHERE key = ?", (key,)).fetchone()
        before = db.execute(f"SELECT {', '.join(self.fields)} FROM search WHERE rowid = ?", (docid,)).fetchone()
        # A TOASTed column PostgreSQL did not resend keeps the text indexed before.
        values = [before[i] if row.get(f) == UNAVAILABLE and before else _text(row.get(f))
                  for i, f in enumerate(self.fields)]
        db.execute("DELETE FROM search WHERE rowid = ?", (docid,))
        db.execute(f"INSERT INTO search (rowid, {', '.join(self.fields)}) VALUES (?{', ?' * len(self.fields)})",
                   (docid, *values))

    def delete(self, db, key: str) -> None:
        found = db.execute("SELECT docid FROM search_keys WHERE key = ?", (key,)).fetchone()
        if found:
            db.execute("DELETE FROM search WHERE rowid = ?", found)
            db.execute("DELETE FROM search_keys WHERE docid = ?", found)


def _text(value) -> str | None:
    return None if value is None else str(value)


class Cache(DerivedStore):
    """Rows as JSON by key in a key-value table `cache`."""

    schema = "CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL);"

    def upsert(self, db, key: str, row: dict) -> None:
        found = db.execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        before = json.loads(found[0]) if found else {}
        row = {c: before.get(c) if v == UNAVAILABLE else v for c, v in row.items()}
        db.execute("INSERT OR REPLACE INTO cache VALUES (?, ?)", (key, json.dumps(row, sort_keys=True)))

    def delete(self, db, key: str) -> None:
        db.execute("DELETE FROM cache WHERE key = ?", (key,))


def _read(path: str, sql: str, params=()) -> Iterator[tuple]:
    db = sqlite3.connect(str(path))
    try:
        yield from db.execute(sql, params).fetchall()
    finally:
        db.close()


def search(path: str, word: str) -> set[str]:
    """The keys of the rows whose indexed text holds `word` (an FTS5 match of one word)."""
    return {key for key, in _read(path, "SELECT k.key FROM search s JOIN search_keys k ON k.docid = s.rowid "
                                        "WHERE search MATCH ?", (json.dumps(word),))}


def indexed(path: str, fields: list[str]) -> dict[str, dict]:
    """key -> the row's indexed fields, as the index holds them."""
    return {key: dict(zip(fields, values)) for key, *values in _read(
        path, f"SELECT k.key, {', '.join(f's.{f}' for f in fields)} FROM search s JOIN search_keys k "
              "ON k.docid = s.rowid")}


def cached(path: str) -> dict[str, dict]:
    return {key: json.loads(value) for key, value in _read(path, "SELECT key, value FROM cache")}


def rejected(path: str) -> dict[tuple, str]:
    """(topic, partition, offset) -> reason."""
    return {(t, p, o): reason for t, p, o, reason in _read(path, "SELECT * FROM rejects")}

