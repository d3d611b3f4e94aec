"""The Spark source's columns, built in bulk from confluent-kafka messages, hold what
each message says, in the Kafka source's terms (timestamp types, nulls)."""

from datetime import datetime, timezone

import pytest
from confluent_kafka import Message

from headwater.spark.partition_reader import to_arrow, arrow_schema

T0 = 1_700_000_000_000


@pytest.mark.parametrize("offsets", [(4, 5, 6, 9, 10, 11), (4, 5, 6, 7, 8, 9)], ids=["compaction gap", "no gap"])
def test_columns_match_each_message(offsets):
    # Timestamp types none (0), create (1), log append (2).
    messages = [Message(topic="orders", partition=3, offset=offset, key=None if offset % 3 else b"k%d" % offset,
                        value=None if offset == 6 else b"v%d" % offset,
                        headers=[("h", b"x"), ("empty", None)] if offset % 2 else None,
                        timestamp=(offset % 3, T0 + offset if offset % 3 else 0))
                for offset in offsets]
    batch = to_arrow(messages, arrow_schema(True), include_headers=True)

    assert batch.schema == arrow_schema(True)
    want = {
        "key": [m.key() for m in messages],
        "value": [m.value() for m in messages],
        "topic": ["orders"] * 6,
        "partition": [3] * 6,
        "offset": list(offsets),
        "timestamp": [datetime.fromtimestamp((T0 + o) / 1000, timezone.utc) if o % 3 else None
                      for o in offsets],
        "timestampType": [{0: -1, 1: 0, 2: 1}[o % 3] for o in offsets],
        "headers": [[{"key": "h", "value": b"x"}, {"key": "empty", "value": None}] if o % 2 else None
                    for o in offsets],
    }
    assert batch.to_pydict() == want
