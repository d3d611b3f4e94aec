"""The contract every connector keeps, run against PostgreSQL (pgoutput) and SQLite
(triggers) alike: the snapshot meets the stream with no gap and no overlap under concurrent
writes, and SIGKILL under write load loses nothing."""
import random
import re

import pytest

from .harness import ConnectorProcess, InThread, apply, expected_history
from .sources import source_for
from .topics import changes, read_topic, replay, wait_for

PRELOAD = 2000


@pytest.fixture(params=["postgres", "sqlite"])
def source(request, broker, tmp_path):
    return source_for(request, broker, tmp_path)


def preload(source):
    source.create_acct(PRELOAD)
    return {i: i for i in range(1, PRELOAD + 1)}


def test_snapshot_meets_stream_under_concurrent_writes(source, broker):
    initial = preload(source)
    writer = source.writer(PRELOAD + 1)
    writer.start()
    wait_for(lambda: len(writer.log) >= 30, what="writes before the snapshot")
    run = InThread(source.connector())
    run.wait(source.streaming, what="the stream to start")
    streamed_from = len(writer.log)
    wait_for(lambda: len(writer.log) >= streamed_from + 30, what="writes after the snapshot")
    writer.stop()
    source.caught_up()
    run.close()

    events = changes(read_topic(broker.bootstrap, source.topic))
    reads = [e for e in events if e["op"] == "r"]
    stream = [e for e in events if e["op"] != "r"]
    # The snapshot is a prefix of the commit order, the stream is exactly the rest.
    before = writer.log[:len(writer.log) - len(stream)]
    after = writer.log[len(before):]
    assert len(before) >= 30 and len(after) >= 30
    assert [e["source"]["txId"] for e in stream] == [txid for txid, *_ in after]
    assert [(e["op"], (e["after"] or e["before"])["id"]) for e in stream] == [(op, key) for _, op, key, _ in after]
    assert [e["after"]["v"] for e in stream if e["op"] != "d"] == [v for _, op, _, v in after if op != "d"]
    # Every row exactly once, as of the snapshot.
    assert len(reads) == len({e["after"]["id"] for e in reads})
    assert {e["after"]["id"]: e["after"]["v"] for e in reads} == apply(initial, before)
    # Streamed changes lie after the snapshot's point in the WAL, except perhaps the first
    # transaction's: PostgreSQL can reach the slot's consistent point while a transaction
    # that wrote before it is still open (it streams that transaction, which commits after).
    # The writer runs one transaction at a time, so only the first streamed one can straddle.
    # (SQLite has no transaction ids, and no such point: every streamed change counts.)
    first = stream[0]["source"]["txId"]
    later = [s for s in stream if first is None or s["source"]["txId"] != first]
    assert later and all(e["source"]["lsn"] <= s["source"]["lsn"] for e in reads[:1] for s in later)


def test_sigkill_under_write_load_loses_nothing(source, broker, tmp_path):
    initial = preload(source)

    def status_lines():
        return len(re.findall(source.status_line(r"\d+"), connector.log()))

    connector = ConnectorProcess(*source.cli_args(), log_path=tmp_path / "connector.log").start()
    wait_for(source.streaming, what="the first stream (snapshot done)")
    writer = source.writer(PRELOAD + 1)
    writer.start()
    rng = random.Random(3)
    for _ in range(4):
        printed = status_lines()
        wait_for(source.streaming, what="the connector to stream again")
        # A status line of its own: this run loaded its position and ships, so the kill interrupts it.
        wait_for(lambda: status_lines() > printed, what="the connector to report")
        written = len(writer.log)
        wait_for(lambda: len(writer.log) >= written + rng.randint(50, 300), what="more writes")
        connector.kill()
        connector.start()
    writer.stop()
    source.caught_up()
    assert connector.stop() == 143, connector.log()  # SIGTERM: stopped cleanly
    assert re.search(source.status_line(str(PRELOAD)), connector.log())  # as the first run printed it

    records = read_topic(broker.bootstrap, source.topic)
    table, history = replay(records)
    assert {key: row["v"] for key, row in table.items()} == source.rows() == apply(initial, writer.log)
    # Per key, after dropping redeliveries (same position), the changes in commit order, none missing.
    got = {key: [(op, row["v"]) for op, row in ops] for key, ops in history.items()}
    assert got == expected_history(initial, writer.log, source.deleted_v)
