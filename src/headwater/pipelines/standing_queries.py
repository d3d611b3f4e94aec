"""The percolator (`percolator`) as a Spark pipeline: one query reads the queries topic
and the documents topic together and writes each match to a matches topic.

Why foreachBatch and a versioned table, not Spark state: a document must see the
queries as of its own time (its record timestamp), and the two topics are read side by
side, so a query change can arrive in a micro-batch after a document it precedes, or
before one it follows. Every valid query change is kept as a version (query id,
timestamp, partition, offset) in a SQLite table; a micro-batch's documents, in time
order, are matched against the index of the latest versions at or before their time.
Only a query change that arrives after a later document has been matched is too late
to apply to it (it applies from then on).

Exactly once: the versions and the rejects are inserted by their offsets (a replayed
micro-batch inserts nothing new and sees the same versions), and the matches, in a fixed
order, go through `TopicPerBatch`, which writes what a replay had not written yet.

Bad input never stops the query: a query change that is not a query (the key is
missing, the value not JSON or not of the language), a document that is not a JSON
object, and a document field of a type a query cannot compare are each counted in the
`rejects` table with the reason; a rejected query change leaves the query as it was.
"""
from __future__ import annotations

import sqlite3

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from headwater.pipelines.exactly_once import TopicPerBatch
from headwater.pipelines.percolator import BadQuery, QueryIndex, parse_document, parse_query

SCHEMA = """
CREATE TABLE IF NOT EXISTS query_versions (partition INTEGER, offset INTEGER, query_id TEXT NOT NULL,
                                           ts_ms INTEGER NOT NULL, query BLOB, PRIMARY KEY (partition, offset));
CREATE INDEX IF NOT EXISTS query_versions_by_time ON query_versions (ts_ms, partition, offset);
CREATE TABLE IF NOT EXISTS rejects (topic TEXT, partition INTEGER, offset INTEGER, query_id TEXT, reason TEXT,
                                    PRIMARY KEY (topic, partition, offset, query_id));
"""
MATCH = "query_id string, partition int, offset long, ts_ms long, document string"
_IN_ORDER = "ORDER BY ts_ms, partition, offset"


class Percolator:
    """A foreachBatch function over the union of the queries and documents topics
    (records of the `headwater` source); `path` is its SQLite state (versions, rejects)."""

    def __init__(self, path: str, client: dict, queries_topic: str, matches_topic: str):
        self.path, self.queries_topic = str(path), queries_topic
        self.matches = TopicPerBatch(client, matches_topic, "query_id")

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        records = batch.select("topic", "partition", "offset", "key", "value",
                               F.unix_millis("timestamp").alias("ts_ms")).collect()
        records.sort(key=lambda r: (r.ts_ms, r.topic != self.queries_topic, r.topic, r.partition, r.offset))
        db = sqlite3.connect(self.path)
        try:
            with db:
                db.executescript(SCHEMA)
                documents = []
                for r in records:
                    if r.topic == self.queries_topic:
                        self._store(db, r)
                    else:
                        documents.append(r)
                matches = self._match(db, documents)
        finally:
            db.close()
        self.matches(batch.sparkSession.createDataFrame(matches, MATCH), batch_id)

    def _store(self, db, r: Row) -> None:
        value = None if r.value is None else bytes(r.value)
        try:
            if r.key is None:
                raise BadQuery("no key: a query's key is its id")
            query_id = bytes(r.key).decode()
            if value is not None:
                parse_query(value)
        except (BadQuery, UnicodeDecodeError) as exc:
            _reject(db, r, "", str(exc))
            return
        db.execute("INSERT OR IGNORE INTO query_versions VALUES (?, ?, ?, ?, ?)",
                   (r.partition, r.offset, query_id, r.ts_ms, value))

    def _match(self, db, documents: list[Row]) -> list[Row]:
        if not documents:
            return []
        index = QueryIndex()
        first, last = documents[0].ts_ms, documents[-1].ts_ms
        for query_id, query in db.execute(f"SELECT query_id, query FROM query_versions WHERE ts_ms <= ? {_IN_ORDER}",
                                          (first,)):
            index.put(query_id, query and parse_query(query))
        later = db.execute(f"SELECT ts_ms, query_id, query FROM query_versions WHERE ts_ms > ? AND ts_ms <= ? "
                           f"{_IN_ORDER}", (first, last)).fetchall()
        matches, applied = [], 0
        for d in documents:
            while applied < len(later) and later[applied][0] <= d.ts_ms:
                _, query_id, query = later[applied]
                index.put(query_id, query and parse_query(query))
                applied += 1
            try:
                doc = parse_document(None if d.value is None else bytes(d.value))
            except ValueError as exc:  # not UTF-8 is a ValueError too
                _reject(db, d, "", f"not a document: {exc}")
                continue
            found, mismatches = index.match(doc)
            for query_id, reason in mismatches:
                _reject(db, d, query_id, reason)
            text = bytes(d.value).decode()
            matches += [Row(query_id=q, partition=d.partition, offset=d.offset, ts_ms=d.ts_ms, document=text)
                        for q in found]
        return matches


def _reject(db, r: Row, query_id: str, reason: str) -> None:
    db.execute("INSERT OR IGNORE INTO rejects VALUES (?, ?, ?, ?, ?)", (r.topic, r.partition, r.offset, query_id,
                                                                         reason))


def read_rejects(path: str) -> dict[tuple, str]:
    """(topic, partition, offset, query id or '') -> reason."""
    db = sqlite3.connect(str(path))
    try:
        return {(t, p, o, q): reason for t, p, o, q, reason in db.execute("SELECT * FROM rejects")}
    finally:
        db.close()
