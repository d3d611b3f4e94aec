"""Push subscriptions in-process: which offsets may be committed, batches, the envelope, the backoff."""
import base64
import hashlib
import hmac
import json
import random

import pytest

from headwater.push import envelope
from headwater.push.batching import OpenBatches
from headwater.push.progress import Progress
from headwater.push.retry import Backoff


def test_commit_moves_only_over_a_prefix_of_finished_records_gaps_included():
    progress = Progress()
    for offset in (3, 4, 7, 8):  # 5 and 6 are not in the log (compacted away)
        progress.taken("t", 0, offset)
    progress.finished("t", 0, 7)
    progress.finished("t", 0, 4)
    assert progress.take_commits() == {}  # 3 is outstanding
    progress.finished("t", 0, 3)
    assert progress.take_commits() == {("t", 0): 8}  # 3, 4 and 7 finished; 5, 6 never existed
    assert progress.take_commits() == {}
    progress.finished("t", 0, 8)
    assert progress.take_commits() == {("t", 0): 9}
    assert progress.outstanding() == 0


def test_a_batch_finishes_its_records_in_one_step():
    progress = Progress()
    for offset in range(10, 16):
        progress.taken("t", 0, offset)
    progress.finished("t", 0, 13, 14, 15)  # the second batch answers first
    assert progress.take_commits() == {}
    progress.finished("t", 0, 10, 11, 12)
    assert progress.take_commits() == {("t", 0): 16}


def test_batches_are_per_partition_and_go_when_full_or_when_their_first_record_waited():
    now = [100.0]
    batches = OpenBatches(size=3, wait=0.5, clock=lambda: now[0])
    records = [envelope.Record("t", i % 2, i // 2, None, None, b"%d" % i) for i in range(8)]
    assert batches.seconds_to_next() is None
    assert [batches.add(r) for r in records[:5]] == [None] * 4 + [[records[0], records[2], records[4]]]
    now[0] += 0.2                           # partition 1's batch opened at 100.0
    batches.add(records[6])                 # partition 0 opens a new batch at 100.2
    assert batches.seconds_to_next() == pytest.approx(0.3) and batches.due() == []
    now[0] += 0.3
    assert batches.due() == [[records[1], records[3]]]
    assert batches.seconds_to_next() == pytest.approx(0.2)
    batches.drop({("t", 0)})                # revoked: its unsent records are the new owner's
    now[0] += 1
    assert batches.due() == [] and batches.seconds_to_next() is None
    assert batches.add(records[5]) is None and batches.seconds_to_next() == pytest.approx(0.5)


def test_a_revoked_partition_forgets_its_records():
    progress = Progress()
    progress.taken("t", 1, 0)
    progress.taken("t", 2, 0)
    progress.finished("t", 2, 0)
    progress.forget({("t", 1), ("t", 2)})
    progress.finished("t", 1, 0)  # finished after the revoke: the new owner delivers it again
    assert progress.take_commits() == {}


def test_signature_is_hmac_sha256_of_the_exact_body():
    record = envelope.Record("t", 2, 41, 1700000000000, b"k\xff", None, (("h", b"\x00"),))
    payload = envelope.body(record, attempt=3)
    headers = envelope.headers(record, 3, payload, b"secret")
    assert headers["Headwater-Signature"] == "sha256=" + hmac.new(b"secret", payload, hashlib.sha256).hexdigest()
    assert envelope.verify(b"secret", payload, headers["Headwater-Signature"])
    assert not envelope.verify(b"secret", payload.replace(b"41", b"42"), headers["Headwater-Signature"])
    assert not envelope.verify(b"other", payload, headers["Headwater-Signature"])
    assert json.loads(payload) == {"topic": "t", "partition": 2, "offset": 41, "timestamp": 1700000000000,
                                   "key": "a/8=", "value": None, "headers": [{"key": "h", "value": "AA=="}],
                                   "attempt": 3}
    assert headers["Headwater-Key"] == "a/8=" and headers["Headwater-Delivery-Attempt"] == "3"


def test_a_batch_body_is_the_array_of_the_records_bodies_signed_as_a_whole():
    records = [envelope.Record("t\u00e9", 1, 7 + i, 1700000000000 + i, None if i == 1 else b"k%d" % i,
                               None if i == 2 else bytes(range(i * 40, i * 40 + 40)), (("h", b"\x00\xff"), ("n", None)))
               for i in range(4)]
    payload = envelope.batch_body(records, attempt=2)
    expected = [{"topic": r.topic, "partition": 1, "offset": r.offset, "timestamp": r.timestamp,
                 "key": r.key and base64.b64encode(r.key).decode(), "value": r.value and base64.b64encode(r.value).decode(),
                 "headers": [{"key": "h", "value": "AP8="}, {"key": "n", "value": None}], "attempt": 2} for r in records]
    assert json.loads(payload) == expected
    assert [json.loads(envelope.body(r, 2)) for r in records] == expected
    headers = envelope.batch_headers(records, 2, payload, b"secret")
    assert envelope.verify(b"secret", payload, headers["Headwater-Signature"])
    assert {k: v for k, v in headers.items() if k != "Headwater-Signature"} == {
        "Content-Type": "application/json", "Headwater-Topic": "t\u00e9", "Headwater-Partition": "1",
        "Headwater-Batch-Size": "4", "Headwater-Delivery-Attempt": "2"}


def test_backoff_doubles_with_jitter_in_the_upper_half_and_is_capped():
    backoff, rng = Backoff(base=0.5, ceiling=4.0), random.Random(7)
    for failures, step in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10, 4.0)]:
        delays = [backoff.delay(failures, rng) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in delays)
        assert max(delays) - min(delays) > step / 4  # jittered, not constant
