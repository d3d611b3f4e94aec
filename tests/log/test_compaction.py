"""Log compaction seen by a real consumer: after the background cleaner ran, replaying a
compacted topic from `earliest` gives the latest value of every key at its original
offset, and deleted keys disappear once their tombstones are older than
delete.retention.ms. The expected content is a dict built in plain Python from what was sent."""
from __future__ import annotations

import random
import time

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from headwater.testing import wait_until

from tests.support.clients import CODECS
from tests.support.logview import create_topic, log_bytes, produce_rounds, read_all

SEGMENT_MS = 1000  # a produce after this long rolls the active segment, which makes it cleanable
COMPACTED = {"cleanup.policy": "compact", "segment.bytes": "2048", "segment.ms": str(SEGMENT_MS),
             "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0", "delete.retention.ms": "86400000"}


@pytest.fixture
def cleaning_broker(start_broker):
    return start_broker("--cleaner-interval-ms", "100")


def latest_per_key(sent) -> dict:
    """key -> (offset, value) of its last record: what compaction must keep."""
    latest = {}
    for offset, key, value in sent:
        latest[key] = (offset, value)
    return latest


def as_view(latest: dict) -> list:
    return sorted((offset, key, value) for key, (offset, value) in latest.items())


def roll_with_marker(bootstrap, topic, name):
    """Close the active segment (it is never cleaned) by appending after segment.ms."""
    time.sleep(SEGMENT_MS / 1000 + 0.2)
    return produce_rounds(bootstrap, topic, [[(name.encode(), b"marker")]])


def updates(keys: int, rounds: int, deleted: set[int]):
    """Rounds of updates to every key; the last round deletes some keys (tombstones), and
    key 0 is deleted in the middle and set again, so its tombstone must not win."""
    out = []
    for r in range(rounds):
        batch = [(f"customer-{k}".encode(), f"round {r} of customer {k} ".encode() * 3) for k in range(keys)]
        if r == rounds // 2:
            batch.append((b"customer-0", None))
        out.append(batch)
    out.append([(f"customer-{k}".encode(), None) for k in sorted(deleted)])
    return out


@pytest.mark.parametrize("codec", CODECS)
def test_compaction_keeps_the_latest_value_of_each_key(cleaning_broker, codec):
    bootstrap, topic = cleaning_broker.bootstrap, f"customers-{codec}"
    create_topic(bootstrap, topic, **COMPACTED)
    deleted = {3, 7, 11}
    sent = produce_rounds(bootstrap, topic, updates(20, 8, deleted), **{"compression.type": codec})
    sent += roll_with_marker(bootstrap, topic, "marker-1")
    payload = sum(len(key) + len(value or b"") for _, key, value in sent)

    latest = latest_per_key(sent)
    assert len(latest) == 21 and all(latest[f"customer-{k}".encode()][1] is None for k in deleted)
    assert latest[b"customer-0"][1] is not None
    # Deleted keys still show their tombstone: consumers have delete.retention.ms to see it.
    expected = as_view(latest)
    wait_until(lambda: read_all(bootstrap, topic) == expected, what="the compacted view")
    assert log_bytes(cleaning_broker.data_dir, topic) < payload / 2  # what was sent no longer fits

    # Once tombstones are older than delete.retention.ms, the next pass removes them.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("delete.retention.ms", "0", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    sent += roll_with_marker(bootstrap, topic, "marker-2")
    live = {key: found for key, found in latest_per_key(sent).items() if found[1] is not None}
    assert len(live) == 22 - len(deleted)
    wait_until(lambda: read_all(bootstrap, topic) == as_view(live), what="tombstones to go")


def _kill_mid_clean(proc, partition_dir, window=5.0) -> bool:
    """SIGKILL as soon as the cleaner has a rewrite on disk (.cleaned before its commit,
    .swap after it); at the end of the window otherwise. True if it caught the cleaner."""
    deadline = time.monotonic() + window
    while time.monotonic() < deadline:
        if any(p.suffix in (".cleaned", ".swap") for p in partition_dir.iterdir()):
            proc.kill()
            return True
        time.sleep(0.0005)
    proc.kill()
    return False


def test_sigkill_during_cleaning_loses_no_latest_value(start_broker):
    """Kill the broker while the cleaner rewrites segments, repeatedly: after each restart
    the latest value of every key is still there, at its offset."""
    proc = start_broker("--cleaner-interval-ms", "200")
    topic = "accounts"
    create_topic(proc.bootstrap, topic, **{**COMPACTED, "segment.bytes": "16384"})
    rng = random.Random(4)
    sent, caught = [], 0
    for round_no in range(6):
        batch = [(f"account-{rng.randrange(60)}".encode(), rng.randbytes(150)) for _ in range(1500)]
        batch += [(f"account-{k}".encode(), None) for k in rng.sample(range(60), 3)]
        sent += produce_rounds(proc.bootstrap, topic, [batch[i:i + 200] for i in range(0, len(batch), 200)],
                               **{"compression.type": ("zstd", "lz4")[round_no % 2], "acks": "all"})
        caught += _kill_mid_clean(proc, proc.data_dir / f"{topic}-0")
        proc.restart()
        replay = read_all(proc.bootstrap, topic)
        offsets = [offset for offset, _, _ in replay]
        assert offsets == sorted(set(offsets))
        assert latest_per_key(replay) == latest_per_key(sent), f"after kill {round_no + 1}"
    assert caught, "no kill landed while the cleaner was rewriting a segment"
    wait_until(lambda: len(read_all(proc.bootstrap, topic)) < len(sent) / 4, what="the cleaner to catch up")
    assert latest_per_key(read_all(proc.bootstrap, topic)) == latest_per_key(sent)
