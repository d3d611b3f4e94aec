"""An insert's value filled into its transaction's template has the very bytes of the
generic envelope: compact JSON in the Debezium field order (ground truth: the standard json module)."""
import json

import pytest

from headwater.cdc.envelope import Source, create_template, create_value, event_key, row_events


def envelope(after: dict, source: dict, ts_ms: int) -> bytes:
    value = {"before": None, "after": after, "source": source, "op": "c", "ts_ms": ts_ms}
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.mark.parametrize("db, table, after", [
    ("shop", "orders", {"id": 7, "note": "plain"}),
    ("100%db", "50%_off", {"id": -1, "note": "%d %s %b %% \"quoted\" \\ é 日本", "n": None, "f": 1.5, "ok": True}),
])
def test_a_filled_template_equals_the_generic_envelope(db, table, after):
    source = Source("postgresql", db, "public", table, 0x16B3748, 491, 1_700_000_000_123).as_json()
    template = create_template(source)
    value = create_value(template, after, 0x16B3750, 1_700_000_000_456)
    assert value == envelope(after, {**source, "lsn": 0x16B3750}, 1_700_000_000_456)
    key = event_key(["id"], after)
    assert key == json.dumps({"id": after["id"]}).replace(" ", "").encode()
    generic, = row_events("t", ["id"], "c", None, after, {**source, "lsn": 0x16B3750})
    assert generic.key == key
