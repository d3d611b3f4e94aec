"""Which input records a shipped pipeline sets aside as dead letters, and the reason given
(`pipelines.dead_letter.Shape`; the pipelines themselves in tests/pipelines/test_pipelines_run.py)."""
import pytest

from headwater.pipelines.dead_letter import Shape, fields

EVENT = Shape(fields("event_id string, user_id string, ts_ms long"))
PRODUCT = Shape({"name": "string", "price": "double", "active": "boolean"}, changelog=True)


@pytest.mark.parametrize("value, reason", [
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": 1700000000000, "extra": [1]}', None),
    (None, "no value"),
    (b"", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b'{"event_id": "e1"', "not JSON: Expecting ',' delimiter: line 1 column 18 (char 17)"),
    (b"\xff\xfe{}", "not JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (b'"e1"', "not a JSON object but a string"),
    (b"[]", "not a JSON object but an array"),
    (b'{"user_id": "ann", "ts_ms": 1}', "missing field event_id"),
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": null}', "missing field ts_ms"),
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": "1700000000000"}', "field ts_ms is a string, not a long"),
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": 1.5}', "field ts_ms is a number, not a long"),
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": true}', "field ts_ms is a boolean, not a long"),
    (b'{"event_id": "e1", "user_id": "ann", "ts_ms": 9223372036854775808}', "field ts_ms is out of the range of a long"),
    (b'{"event_id": 1, "user_id": "ann", "ts_ms": 1}', "field event_id is a number, not a string"),
])
def test_events(value, reason):
    assert EVENT.reason(b"key", value) == reason


@pytest.mark.parametrize("key, value, reason", [
    (b"p1", b'{"name": "tent", "price": 180, "active": false}', None),  # an integer is a double
    (b"p1", None, None),  # a deletion
    (None, b'{"name": "tent", "price": 180.0, "active": true}', "no key"),
    (b"\xff", None, "key is not UTF-8"),
    (b"p1", b'{"name": "tent", "price": true, "active": true}', "field price is a boolean, not a double"),
    (b"p1", b'{"name": "tent", "price": 1.0, "active": 1}', "field active is a number, not a boolean"),
])
def test_changelog_records(key, value, reason):
    assert PRODUCT.reason(key, value) == reason
