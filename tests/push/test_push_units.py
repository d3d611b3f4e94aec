"""Push subscriptions in-process: which offsets may be committed, the signature, the backoff."""
import hashlib
import hmac
import json
import random

from headwater.push import envelope
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


def test_backoff_doubles_with_jitter_in_the_upper_half_and_is_capped():
    backoff, rng = Backoff(base=0.5, ceiling=4.0), random.Random(7)
    for failures, step in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (10, 4.0)]:
        delays = [backoff.delay(failures, rng) for _ in range(200)]
        assert all(step / 2 <= d <= step for d in delays)
        assert max(delays) - min(delays) > step / 4  # jittered, not constant
