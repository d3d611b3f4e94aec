"""The percolator's query language and index, in-process: the index answers what the
naive loop over every query answers, while evaluating far fewer queries."""
import random

import pytest

from headwater.demo.outdoor_shop import document, standing_query
from headwater.pipelines.percolator import BadQuery, FieldTypeError, QueryIndex, compile_query, evaluate

TENTS = {"all": [{"term": ["title", "tent"]}, {"field": "price", "op": "<", "value": 100},
                 {"field": "category", "op": "=", "value": "tents"}]}


def test_the_issue_example_matches_a_cheap_tent_only():
    query = compile_query(TENTS)
    assert query.matches({"title": "Red Tent", "price": 99.5, "category": "tents"})
    assert not query.matches({"title": "Red Tent", "price": 100, "category": "tents"})
    assert not query.matches({"title": "tent peg", "price": 5, "category": "spares"})
    assert not query.matches({"price": 5, "category": "tents"})  # no title: the term cannot hold
    assert compile_query({"phrase": ["title", "red tent"]}).matches({"title": "big red tent"})
    assert not compile_query({"phrase": ["title", "red tent"]}).matches({"title": "tent, red"})


def test_a_field_of_the_wrong_type_is_an_error_of_that_query_only():
    index = QueryIndex()
    index.put("cheap", compile_query({"field": "price", "op": "<", "value": 100}))
    index.put("tents", compile_query({"field": "category", "op": "=", "value": "tents"}))
    assert index.match({"price": "cheap", "category": "tents"}) == (
        ["tents"], [("cheap", "field price is str, the query compares it < int")])
    with pytest.raises(FieldTypeError):
        compile_query({"term": ["title", "tent"]}).matches({"title": 7})


def test_equality_with_an_array_or_object_is_found_by_the_index_too():
    index = QueryIndex()
    index.put("tags", compile_query({"field": "tags", "op": "=", "value": ["a", "b"]}))
    assert index.match({"tags": ["a", "b"]}) == (["tags"], [])


@pytest.mark.parametrize("spec", [
    "tent", [], {}, {"title": "tent"}, {"all": []}, {"term": ["title", "two words"]}, {"term": ["title", "!!"]},
    {"field": "price", "op": "~", "value": 1}, {"field": "price", "op": "<", "value": None},
    {"field": "price", "op": "<"}, {"not": {"nope": 1}}, {"any": [{"term": ["title", "tent"]}, 3]}])
def test_malformed_queries_are_refused_with_a_reason(spec):
    with pytest.raises(BadQuery):
        compile_query(spec)


def test_index_equals_the_naive_loop_and_evaluates_fewer_queries():
    rng = random.Random(3)
    queries = {f"q{i}": compile_query(standing_query(rng)) for i in range(2000)}
    index = QueryIndex()
    for query_id, query in queries.items():
        index.put(query_id, query)
    for query_id in list(queries)[::7]:  # replaced and deleted queries leave the index too
        queries[query_id] = compile_query(standing_query(rng))
        index.put(query_id, queries[query_id])
    for query_id in list(queries)[::11]:
        del queries[query_id]
        index.put(query_id, None)
    evaluated = 0
    for n in range(300):
        doc = document(rng, n)
        assert index.match(doc) == evaluate(queries.items(), doc)
        evaluated += len(index.candidates(doc))
    assert evaluated < 300 * len(queries) / 5
