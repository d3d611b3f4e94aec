"""Search on streams (the percolator): store the queries, stream the documents.

Users register standing queries in a compacted topic (key = query id, value = the
query as JSON, a tombstone deletes it); every document of the documents topic is
matched against every query live at the document's time, and each match goes to a
matches topic keyed by query id.

The query language is JSON, so it needs no parser:

    {"all": [{"term": ["title", "tent"]}, {"field": "price", "op": "<", "value": 100},
             {"field": "category", "op": "=", "value": "tents"}]}

- {"term": [field, word]}: the field's text holds the word (case-insensitive, words are
  runs of letters and digits); {"phrase": [field, "words in a row"]}
- {"field": f, "op": "=" | "!=" | "<" | "<=" | ">" | ">=", "value": v}: compare a field
  (a document's top-level fields; = and != on any JSON value, the others on numbers or
  on strings); a field absent from the document satisfies nothing but !=
- {"all": [...]}, {"any": [...]}, {"not": q}

Why an index: a naive percolator evaluates every query for every document. Here each
query names index keys one of which every matching document must carry: a word of a
term or phrase, or a field's value under "=" (for "all" one conjunct's keys suffice,
for "any" every disjunct's). A document looks up its own keys (its words and its field
values) and evaluates only the queries found, plus the few no key can select (only
ranges, "!=", "not"), which are evaluated always.

Time: a record's timestamp. A document is matched against each query as of the
document's time (the query change with the latest timestamp at or before it); a query
change at the same millisecond as a document applies to it.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Iterable

WORD = re.compile(r"[^\W_]+")  # letters and digits, as FTS5's unicode61 tokenizer splits
_COMPARE: dict[str, Callable] = {"=": lambda a, b: a == b, "!=": lambda a, b: a != b,
                                 "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
                                 ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}
Key = tuple  # ("word", field, word) or ("=", field, value as canonical JSON)


class BadQuery(ValueError):
    """A query that is not of the language above; the reason is the message."""


class FieldTypeError(TypeError):
    """A document field whose type a query cannot compare (a string where a number is
    asked); the query does not match the document, and the mismatch is reported."""


def words(text: str) -> list[str]:
    return WORD.findall(text.lower())


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _canonical(value) -> str:
    """One spelling per JSON value under "=", so 100 and 100.0 are the same key."""
    return json.dumps(float(value) if _number(value) else value, sort_keys=True)


@dataclass(frozen=True)
class Query:
    """A compiled query: `matches` evaluates it, `keys` are its index keys (None when no
    key can select it)."""
    evaluate: Callable[[dict], bool]
    keys: frozenset | None

    def matches(self, doc: dict) -> bool:
        return self.evaluate(doc)


def _text(doc: dict, field: str) -> list[str] | None:
    value = doc.get(field)
    if value is None:
        return None
    if not isinstance(value, str):
        raise FieldTypeError(f"field {field} is {type(value).__name__}, a term or phrase needs text")
    return words(value)


def _phrase(field: str, wanted: list[str]) -> Query:
    def evaluate(doc: dict) -> bool:
        found = _text(doc, field)
        return found is not None and any(found[i:i + len(wanted)] == wanted for i in range(len(found)))
    # The longest word is the likeliest to be rare: the fewest candidates.
    return Query(evaluate, frozenset({("word", field, max(wanted, key=len))}))


def _compare(field: str, op: str, value) -> Query:
    compare = _COMPARE[op]

    def evaluate(doc: dict) -> bool:
        if field not in doc:
            return op == "!="
        found = doc[field]
        if op in ("=", "!="):
            return compare(_canonical(found), _canonical(value))
        if not (_number(found) and _number(value) or isinstance(found, str) and isinstance(value, str)):
            raise FieldTypeError(f"field {field} is {type(found).__name__}, the query compares it {op} "
                                 f"{type(value).__name__}")
        return compare(found, value)
    # Documents are keyed by their scalar fields only (see `document_keys`).
    keyed = op == "=" and not isinstance(value, (dict, list))
    return Query(evaluate, frozenset({("=", field, _canonical(value))}) if keyed else None)


def _all(parts: list[Query]) -> Query:
    keyed = [p.keys for p in parts if p.keys is not None]
    return Query(lambda doc: all(p.matches(doc) for p in parts), min(keyed, key=len) if keyed else None)


def _any(parts: list[Query]) -> Query:
    keys = None if any(p.keys is None for p in parts) else frozenset().union(*(p.keys for p in parts))
    return Query(lambda doc: any(p.matches(doc) for p in parts), keys)


def compile_query(spec) -> Query:
    """A query from its JSON form; BadQuery says what is wrong."""
    if not isinstance(spec, dict) or (len(spec) != 1 and "field" not in spec):
        raise BadQuery(f"a query is an object with one of all, any, not, term, phrase, field: {spec!r:.80}")
    if "field" in spec:
        field, op, value = spec.get("field"), spec.get("op"), spec.get("value")
        if set(spec) != {"field", "op", "value"} or not isinstance(field, str) or op not in _COMPARE:
            raise BadQuery(f"a comparison is {{field: name, op: one of {' '.join(_COMPARE)}, value}}: {spec!r:.80}")
        if op not in ("=", "!=") and not (isinstance(value, str) or _number(value)):
            raise BadQuery(f"{op} compares with a number or a string: {spec!r:.80}")
        return _compare(field, op, value)
    (kind, arg), = spec.items()
    if kind in ("all", "any"):
        if not isinstance(arg, list) or not arg:
            raise BadQuery(f"{kind} takes a non-empty list of queries")
        return (_all if kind == "all" else _any)([compile_query(part) for part in arg])
    if kind == "not":
        inner = compile_query(arg)
        return Query(lambda doc: not inner.matches(doc), None)
    if kind in ("term", "phrase"):
        if not (isinstance(arg, list) and len(arg) == 2 and all(isinstance(a, str) for a in arg)) or not words(arg[1]):
            raise BadQuery(f"{kind} takes [field, text] with at least one word")
        wanted = words(arg[1])
        if kind == "term" and len(wanted) > 1:
            raise BadQuery(f"a term is one word; use phrase for {arg[1]!r}")
        return _phrase(arg[0], wanted)
    raise BadQuery(f"unknown query kind {kind!r}")


def parse_query(value: bytes) -> Query:
    try:
        spec = json.loads(value.decode())
    except ValueError as exc:
        raise BadQuery(f"not JSON: {exc}") from None
    return compile_query(spec)


def document_keys(doc: dict) -> set[Key]:
    keys = set()
    for field, value in doc.items():
        if isinstance(value, str):
            keys.update(("word", field, w) for w in words(value))
        if not isinstance(value, (dict, list)):
            keys.add(("=", field, _canonical(value)))
    return keys


def evaluate(queries: Iterable[tuple[str, Query]], doc: dict) -> tuple[list[str], list[tuple[str, str]]]:
    """(ids of the queries that match, (id, reason) of those that met a field of the wrong type)."""
    matched, mismatches = [], []
    for query_id, query in queries:
        try:
            if query.matches(doc):
                matched.append(query_id)
        except FieldTypeError as exc:
            mismatches.append((query_id, str(exc)))
    return sorted(matched), sorted(mismatches)


class QueryIndex:
    """The live queries, indexed by their keys."""

    def __init__(self):
        self.queries: dict[str, Query] = {}
        self.by_key: dict[Key, set[str]] = defaultdict(set)
        self.always: set[str] = set()

    def put(self, query_id: str, query: Query | None) -> None:
        """Add or replace a query; None deletes it."""
        old = self.queries.pop(query_id, None)
        if old is not None:
            for key in old.keys or ():
                self.by_key[key].discard(query_id)
            self.always.discard(query_id)
        if query is None:
            return
        self.queries[query_id] = query
        if query.keys is None:
            self.always.add(query_id)
        for key in query.keys or ():
            self.by_key[key].add(query_id)

    def candidates(self, doc: dict) -> set[str]:
        found = set(self.always)
        for key in document_keys(doc):
            found |= self.by_key.get(key, set())
        return found

    def match(self, doc: dict) -> tuple[list[str], list[tuple[str, str]]]:
        return evaluate(((q, self.queries[q]) for q in self.candidates(doc)), doc)


def parse_document(value: bytes | None) -> dict:
    """A document's JSON object; ValueError says why not."""
    if value is None:
        raise ValueError("no value")
    doc = json.loads(value.decode())
    if not isinstance(doc, dict):
        raise ValueError(f"not a JSON object but {type(doc).__name__}")
    return doc
