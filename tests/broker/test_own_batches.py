"""The appender's path for batches the broker encoded itself (the HTTP API's produce): the
topic's rules apply as to a client's batch, with the same answer and the same stored bytes,
only the records are not walked again. In-process, against the client path on twin topics."""
from __future__ import annotations

import time

import pytest

from headwater.records import Record, encode_batch

from tests.support.clock import ManualClock
from tests.support.parts import close_appender, open_appender

NOW = int(time.time() * 1000)


@pytest.fixture(scope="module")
def appender(tmp_path_factory):
    appender = open_appender(tmp_path_factory.mktemp("own") / "data")
    yield appender
    close_appender(appender)


def _records(keys: list[bytes | None], timestamp: int = NOW) -> list[Record]:
    return [Record(n, timestamp, key, b"value-%d" % n if n % 3 else None, [("h", b"%d" % n), ("null", None)])
            for n, key in enumerate(keys)]


def _stored(appender, topic: str) -> bytes:
    plog = appender.log_manager.get_log(topic, 0)
    return plog.read(0, 1 << 20) if plog.log_end_offset else b""


@pytest.mark.parametrize("configs, records", [
    ({}, _records([b"a", None, b"c"])),
    ({"compression.type": "zstd"}, _records([b"a", b"b"] * 20)),                     # recompressed to the topic's codec
    ({"cleanup.policy": "compact"}, _records([b"a", b"b", b"c"])),
    ({"cleanup.policy": "compact"}, _records([b"a", None, b"c", None])),              # refused, naming records 1 and 3
    ({"max.message.bytes": "200"}, _records([b"a"] * 10)),                            # a batch over the topic's limit
    ({"message.timestamp.after.max.ms": "1000"}, _records([b"a"], NOW + 3_600_000)),  # out of the topic's bounds
    ({"message.timestamp.type": "LogAppendTime"}, _records([b"a", b"b"])),
])
def test_an_own_batch_is_answered_and_stored_as_a_clients(appender, configs, records, monkeypatch):
    monkeypatch.setattr(time, "time", lambda: NOW / 1000)  # one broker time for both paths (LogAppendTime, bounds)
    batch, keyless = encode_batch(records), [n for n, r in enumerate(records) if r.key is None]
    answers = {}
    for path in ("client", "own"):
        topic = f"{path}-{len(appender.log_manager.topics)}"
        appender.log_manager.create_topic(topic, 1, configs)
        answer = appender.append(topic, 0, batch, keyless=None if path == "client" else keyless)
        answers[path] = (answer.error, answer.message, answer.record_errors, _stored(appender, topic))
    assert answers["own"] == answers["client"]



def test_the_brokers_own_state_records_take_the_own_path(appender, monkeypatch):
    """The internal topics' records (here the share groups' state) are encoded by the broker,
    every one keyed: appended without the client path's walk of their records, read back as written."""
    import headwater.broker.appender as appender_module
    from headwater.broker.share.partition import SharePartition
    from headwater.broker.share.store import ShareStateStore

    def walked(*_):
        raise AssertionError("the client path validated a batch the broker encoded itself")
    store = ShareStateStore(appender, ManualClock())
    monkeypatch.setattr(appender_module, "validate", walked)
    sp = SharePartition(ManualClock(), 0, lock_duration_ms=30_000, delivery_count_limit=5)
    sp.acquire("a", 3, until=3)
    assert store.save_partition("g", "orders", 0, sp)
    assert store.load()[0][("g", "orders", 0)]["ranges"] == [[0, 2, 1, 1]]
