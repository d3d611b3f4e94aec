"""The console's message search in-process: each filter against a plain-Python predicate over
the same records, the scan budget honoured, and a continuation that finds the rest."""
import json

import pytest

from headwater.http.search import BadFilter, Filter, search
from headwater.records import Record, encode_batch

from .parts import close_appender, open_appender

RECORDS = [(f"order-{i}".encode() if i % 7 else None,
            json.dumps({"order": i, "items": [{"sku": "tea", "qty": i % 4}], "total": i * 2.5}).encode()
            if i % 5 else b"not json", [("source", f"till-{i % 3}".encode())], 1_000_000 + i * 1000)
           for i in range(200)]   # (key, value, headers, timestamp)


@pytest.fixture
def topic(tmp_path):
    appender = open_appender(tmp_path / "data")   # the append path is all a search needs
    appender.log_manager.create_topic("orders", 2, {})
    for partition in (0, 1):
        mine = RECORDS[partition::2]
        for start in range(0, len(mine), 10):   # several batches
            batch = [Record(n, ts, k, v, h) for n, (k, v, h, ts) in enumerate(mine[start:start + 10])]
            assert appender.append("orders", partition, encode_batch(batch)).error == 0
    yield appender.log_manager.topics["orders"]
    close_appender(appender)


def found(topic, where: Filter, **limits):
    result = search([(i, p, 0, None) for i, p in enumerate(topic.partitions)], where, **limits)
    return result, [(p, r.offset) for p, r in result.matches]


def expected(predicate) -> list[tuple[int, int]]:
    return [(p, n) for p in (0, 1) for n, (k, v, h, ts) in enumerate(RECORDS[p::2]) if predicate(k, v, h, ts)]


def document(value: bytes):
    try:
        return json.loads(value)
    except ValueError:
        return None


@pytest.mark.parametrize("where, predicate", [
    (Filter(), lambda k, v, h, ts: True),
    (Filter(key="order-1"), lambda k, v, h, ts: k is not None and b"order-1" in k),
    (Filter(key="order-1", key_exact=True), lambda k, v, h, ts: k == b"order-1"),
    (Filter(value='"total": 12'), lambda k, v, h, ts: b'"total": 12' in v),
    (Filter(path="$.items[?(@.qty > 2)]"), lambda k, v, h, ts: (d := document(v)) and d["items"][0]["qty"] > 2),
    (Filter(path="$.order", equals="42"), lambda k, v, h, ts: (d := document(v)) and d["order"] == 42),
    (Filter(header="source", header_value="till-2"), lambda k, v, h, ts: ("source", b"till-2") in h),
    (Filter(since=1_050_000, until=1_060_000), lambda k, v, h, ts: 1_050_000 <= ts <= 1_060_000),
])
def test_each_filter_finds_what_a_plain_predicate_finds(topic, where, predicate):
    result, matches = found(topic, where, shown=len(RECORDS))
    assert matches == expected(predicate)
    assert (result.scanned, result.done) == (len(RECORDS), True)


def test_the_budget_bounds_a_search_and_a_continuation_finds_the_rest(topic):
    where = Filter(value="tea")
    first = search([(i, p, 0, None) for i, p in enumerate(topic.partitions)], where, budget=130, shown=len(RECORDS))
    assert (first.scanned, first.done, first.positions) == (130, False, {0: 100, 1: 30})
    rest = search([(i, p, first.positions[i], None) for i, p in enumerate(topic.partitions)], where, budget=130, shown=len(RECORDS))
    assert (rest.scanned, rest.done) == (70, True)
    everything = [(p, r.offset) for p, r in first.matches + rest.matches]
    assert everything == expected(lambda k, v, h, ts: b"tea" in v)
    shown = search([(i, p, 0, None) for i, p in enumerate(topic.partitions)], where, shown=5)
    assert [(p, r.offset) for p, r in shown.matches] == everything[:5] and not shown.done


def test_a_malformed_json_path_is_a_clear_error():
    with pytest.raises(BadFilter, match=r"JSON path '\$\[\?\('"):
        Filter(path="$[?(")
    with pytest.raises(BadFilter, match="needs a JSON path"):
        Filter(equals="3")
