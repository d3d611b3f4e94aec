"""`headwater pipelines run` on a topic that mixes good events with bad records: the
answer is plain Python's on the good ones, the bad ones (and only they) are in the
dead-letter topic with their reasons, and a progress line per micro-batch counts what
happened. The command runs in a subprocess (this process may hold the suite's session)."""
from __future__ import annotations

import datetime
import json
import re
import sqlite3
import subprocess
import sys
from collections import Counter

import pytest
from tests.support.sparkdata import MINUTE, create_topic, produce, user_events

from headwater.pipelines import reference
from headwater.testing import BrokerProcess

pytestmark = pytest.mark.xdist_group("spark")
LATENESS_MS = 2 * MINUTE  # the windows pipeline's defaults: 2 minutes late, 1-minute windows
# Four micro-batches of the 84 records, each with dead letters, two with events too late: a micro-batch
# fewer costs the command seconds (locally, and more on the cluster of test_kafka_cluster.py).
PER_TRIGGER = 21
BAD = [  # value, why it is bad
    (b"not json", "not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b"\xff\xfe{", "not JSON: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
    (b'[{"event_id": "a", "user_id": "ann", "ts_ms": 1}]', "not a JSON object but an array"),
    (b'{"event_id": "b", "user_id": "bob"}', "missing field ts_ms"),
    (b'{"event_id": "c", "user_id": "cy", "ts_ms": "soon"}', "field ts_ms is a string, not a long"),
    (b'{"event_id": "d", "user_id": 7, "ts_ms": 1700000000000}', "field user_id is a number, not a string"),
    (None, "no value"),
]
PROGRESS = re.compile(r"pipeline=windows batch=(\d+) rows_in=(\d+) rows_out=(\d+) watermark=(\S+) "
                      r"too_late=(\d+) dead_letters=(\d+)")


def mixed_records() -> list[tuple[bytes, bytes | None, dict | None]]:
    """(key, value, the event or None when bad): good events with a bad record after every
    seventh, in the order they are produced."""
    records = []
    for event in (e for batch in user_events(seed=5) for e in batch):
        records.append((event["event_id"].encode(), json.dumps(event).encode(), event))
        if len(records) % 8 == 7:
            value, _ = BAD[len(records) // 8 % len(BAD)]
            records.append((f"bad-{len(records)}".encode(), value, None))
    return records


def iso(ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def expected_progress(chunks: list[list]) -> list[tuple]:
    """(rows in, watermark, too late, dead letters) per micro-batch that read records."""
    good = [[e for _, _, e in chunk if e is not None] for chunk in chunks]
    lines, seen = [], []
    for i, chunk in enumerate(chunks):
        dropped_before = reference.admitted(good[:i], LATENESS_MS)[1] if i else 0
        dropped = reference.admitted(good[:i + 1], LATENESS_MS)[1] - dropped_before
        seen += [e["ts_ms"] for e in good[i - 1]] if i else []
        lines.append((len(chunk), iso(max(seen) - LATENESS_MS) if seen else "none", dropped,
                      sum(e is None for _, _, e in chunk)))
    return lines


def dead_letters(bootstrap: str, topic: str) -> dict[int, tuple]:
    """Source offset -> (key, value, reason, source topic and partition) of each record in `topic`."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "dlq-reader", "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found = {}
    while (msg := consumer.poll(30)) is not None and not msg.error():
        headers = {k: v.decode() for k, v in msg.headers()}
        found[int(headers["__dlq.errors.offset"])] = (msg.key(), msg.value(), headers["__dlq.errors.message"],
                                                      headers["__dlq.errors.topic"], headers["__dlq.errors.partition"])
    consumer.close()
    assert msg is not None, f"timed out reading {topic}"
    return found


def test_bad_records_go_to_the_dead_letter_topic_and_every_micro_batch_is_reported(tmp_path):
    records = mixed_records()
    chunks = reference.micro_batches(records, PER_TRIGGER)  # one partition: offsets cut the micro-batches
    kept, dropped, watermark = reference.admitted([[e for _, _, e in c if e is not None] for c in chunks],
                                                  LATENESS_MS)
    windows = Counter((e["ts_ms"] // MINUTE * MINUTE, e["user_id"]) for e in kept)
    expected = {k: n for k, n in windows.items() if k[0] + MINUTE <= watermark}

    with BrokerProcess(tmp_path / "data") as broker:
        create_topic(broker.bootstrap, "clicks", 1)
        produce(broker.bootstrap, "clicks", [(k, v, 0, None, None) for k, v, _ in records])
        command = [sys.executable, "-m", "headwater", "pipelines", "run", "windows", "--master", "local[2]",
                   "--bootstrap-server", broker.bootstrap, "--output", str(tmp_path / "out"),
                   "--trigger", "available-now", "--set", "events=clicks", "--set", f"per-trigger={PER_TRIGGER}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-4000:]
        letters = dead_letters(broker.bootstrap, "windows.dlq")

    db = sqlite3.connect(tmp_path / "out" / "windows.db")
    got = {(s, u): n for s, u, n in db.execute("SELECT start_ms, user_id, events FROM window_counts")}
    db.close()
    assert got == expected and len(expected) > 10 and dropped > 0

    reasons = dict(BAD)
    assert letters == {offset: (k, v, reasons[v], "clicks", "0") for offset, (k, v, e) in enumerate(records)
                       if e is None}
    assert set(reasons) <= {v for _, v, *_ in letters.values()}  # every kind of bad record was met

    lines = [tuple(int(g) if g.isdigit() else g for g in m.groups())
             for m in map(PROGRESS.fullmatch, done.stderr.splitlines()) if m]
    assert [n for n, *_ in lines] == list(range(len(lines)))  # one line per micro-batch, in order
    read = [(rows_in, mark, late, bad) for _, rows_in, _, mark, late, bad in lines[:len(chunks)]]
    assert read == expected_progress(chunks)
    assert all(rows_in == bad == 0 for _, rows_in, _, _, _, bad in lines[len(chunks):])  # no-data batches
    assert sum(out for _, _, out, *_ in lines) == len(got)
    assert f"windows: {len(lines)} micro-batches in" in done.stdout
