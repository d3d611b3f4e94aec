"""Growth signals: a waiting fetch is woken by an append, and nothing is kept for partitions
no fetch is watching (finding 7 of issue 10: a Fetch naming unknown partitions leaked one
future each, forever)."""
import asyncio
import struct

from kafka.protocol.consumer import FetchRequest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.apis import ADVERTISED
from headwater.broker.fetch_apis import fetch
from headwater.broker.log_admin_apis import delete_records
from headwater.broker.wakeups import GrowthSignals
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey, RequestHeader, parse_request
from headwater.records import Record, encode_batch

F = FetchRequest[11]
DeleteRecords = MESSAGE_CLASSES[ApiKey.DELETE_RECORDS][0]


def fetch_request(partitions: list[tuple[str, int]], max_wait_ms: int = 0):
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(F.FetchTopic.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
            partition_max_bytes=1 << 20))
    return F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
             session_epoch=-1, topics=[F.FetchTopic(topic=t, partitions=p) for t, p in topics.items()],
             forgotten_topics_data=[], rack_id="")


def test_a_watch_wakes_on_its_partitions_and_is_dropped_when_its_wait_ends():
    async def scenario():
        signals = GrowthSignals()
        with signals.watch([("t", 0), ("t", 1)]) as outer:
            with signals.watch([("t", 0)]) as inner:
                assert len(signals) == 2
                signals.notify("t", 0)
                assert inner.waiter.done() and outer.waiter.done() and outer.take_changed() == {("t", 0)}
            outer.arm()
            assert len(signals) == 2
            signals.notify("t", 2)                       # not watched: wakes no one
            assert not outer.waiter.done()
            assert not await outer.wait(0.01)
        assert len(signals) == 0
    asyncio.run(scenario())


def with_broker(tmp_path, topic: str, partitions: int, scenario) -> None:
    """Run ``scenario(broker, header)`` on an in-process broker with one topic."""
    async def run():
        broker = Broker(BrokerConfig(data_dir=tmp_path))
        try:
            broker.log_manager.create_topic(topic, partitions)
            await scenario(broker, RequestHeader(1, 11, 1, "test"))
        finally:
            broker.close()
    asyncio.run(run())


async def _until(condition, timeout: float = 30) -> None:
    """Wait on the event loop until ``condition()`` holds; fail after ``timeout`` seconds."""
    async def poll() -> None:
        while not condition():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


def test_fetch_of_unknown_partitions_leaves_no_signal(tmp_path):
    async def scenario(broker, header):
        unknown = [(f"ghost-{i}", i % 7) for i in range(20_000)] + [("real", p) for p in range(5, 2_005)]
        for start in range(0, len(unknown), 5_000):
            response = await fetch(broker, header, fetch_request(unknown[start:start + 5_000]))
            assert {p.error_code for t in response.responses for p in t.partitions} == {3}  # UNKNOWN_TOPIC_OR_PARTITION
        assert len(broker.wakeups) == 0

        # A fetch waiting on a real partition holds one signal while it waits and none after.
        waiting = asyncio.create_task(fetch(broker, header, fetch_request([("real", 0)], max_wait_ms=30_000)))
        await _until(lambda: len(broker.wakeups))
        assert len(broker.wakeups) == 1
        assert broker.appender.append("real", 0, encode_batch([Record(0, 1, b"k", b"v")])).error == 0
        response = await asyncio.wait_for(waiting, 30)
        assert response.responses[0].partitions[0].records
        assert len(broker.wakeups) == 0
    with_broker(tmp_path, "real", 2, scenario)


def test_a_fetch_naming_many_partitions_of_a_topic_waits_on_the_topic_and_is_woken_by_any(tmp_path):
    """librdkafka's sessionless fetch names every partition: one registration, not one per partition."""
    async def scenario(broker, header):
        waiting = asyncio.create_task(fetch(broker, header, fetch_request([("t", p) for p in range(100)],
                                                                          max_wait_ms=30_000)))
        await _until(lambda: len(broker.wakeups))
        assert len(broker.wakeups) == 1   # the topic
        assert broker.appender.append("t", 73, encode_batch([Record(0, 1, b"k", b"v")])).error == 0
        [topic] = (await asyncio.wait_for(waiting, 30)).responses
        assert [p.partition_index for p in topic.partitions if p.records] == [73]
        assert len(broker.wakeups) == 0
    with_broker(tmp_path, "t", 100, scenario)


def test_an_idle_session_hears_of_appends_and_of_a_log_start_deletes_records_moved(tmp_path):
    """The session reads only partitions it was told changed: both an append and DeleteRecords must tell it."""
    async def scenario(broker, header):
        for _ in range(2):
            assert broker.appender.append("t", 1, encode_batch([Record(0, 1, b"k", b"v")])).error == 0
        opening = fetch_request([("t", 0), ("t", 1), ("t", 2)])
        opening.session_epoch, opening.topics[0].partitions[1].fetch_offset = 0, 2   # caught up everywhere
        session_id = (await fetch(broker, header, opening)).session_id
        assert session_id and len(broker.wakeups) == 3

        def incremental(epoch, max_wait_ms=0):
            request = fetch_request([], max_wait_ms)
            request.session_id, request.session_epoch = session_id, epoch
            return fetch(broker, header, request)

        assert (await incremental(1)).responses == []
        deleted = DeleteRecords(topics=[DeleteRecords.DeleteRecordsTopic(name="t", partitions=[
            DeleteRecords.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=1, offset=1)])],
            timeout_ms=0)
        await delete_records(broker, RequestHeader(21, 2, 2, "test"), deleted)
        [topic] = (await incremental(2)).responses
        assert [(p.partition_index, p.log_start_offset, p.records) for p in topic.partitions] == [(1, 1, b"")]
        watch = broker.fetch_sessions._sessions[session_id].watch
        previous = watch.waiter
        waiting = asyncio.create_task(incremental(3, max_wait_ms=30_000))
        await _until(lambda: watch.waiter is not previous)   # until the fetch has read and waits
        assert broker.appender.append("t", 2, encode_batch([Record(0, 1, b"k", b"v")])).error == 0
        [topic] = (await asyncio.wait_for(waiting, 30)).responses
        assert [(p.partition_index, p.high_watermark) for p in topic.partitions] == [(2, 1)]
    with_broker(tmp_path, "t", 3, scenario)


def test_a_repeated_fetch_is_decoded_once_seen_twice_and_each_request_gets_its_own_copy():
    """kafka-python sends the same body every fetch.wait.max.ms; authorization replaces a request's topics."""
    body = fetch_request([("t", p) for p in range(50)]).encode(version=11)
    frame = struct.pack(">hhih", ApiKey.FETCH, 11, 7, 4) + b"test" + body
    _, first = parse_request(frame, ADVERTISED)
    (_, second), (_, third) = parse_request(frame, ADVERTISED), parse_request(frame, ADVERTISED)
    assert first.topics[0] is not second.topics[0]   # seen once: decoded, nothing kept
    assert second is not third and second.topics[0] is third.topics[0]   # copies of the one kept
    assert third.topics[0].partitions[49].partition == 49
    second.topics = []
    assert len(third.topics) == 1 and len(parse_request(frame, ADVERTISED)[1].topics) == 1
    other = struct.pack(">hhih", ApiKey.FETCH, 11, 8, 4) + b"test" + fetch_request([("t", 0)], 5).encode(version=11)
    assert parse_request(other, ADVERTISED)[1].max_wait_ms == 5   # another body: decoded anew


def _counted(recent, body: bytes, decodings: list[bytes]):
    return recent.decode(11, body, lambda: decodings.append(body) or [body])


def test_repeated_fetches_kept_within_their_byte_budget():
    from headwater.protocol.messages import _RecentFetches
    recent, decodings = _RecentFetches(100), []
    for name in "abc":
        _counted(recent, name.encode() * 40, decodings)
    _counted(recent, b"x" * 101, decodings)
    assert recent.kept_bytes == 80   # "a" went for "c"; "x", over the budget, is not kept
    for body in (b"c" * 40, b"c" * 40, b"x" * 101):   # "c" kept decoded at its second sight
        _counted(recent, body, decodings)
    assert decodings == [n.encode() * 40 for n in "abc"] + [b"x" * 101, b"c" * 40, b"x" * 101]
    assert recent.kept_bytes == 80


def test_a_body_is_decoded_at_its_first_two_sights_only_and_told_from_one_with_the_same_fingerprint():
    """Bodies are looked up by their length and ends, then compared whole: one differing only in
    the middle is another body, decoded anew, and the one it replaces is no longer counted."""
    from headwater.protocol.messages import _RecentFetches
    recent, decodings = _RecentFetches(1000), []
    first, second = b"a" * 100 + b"1" + b"z" * 100, b"a" * 100 + b"2" + b"z" * 100
    seen = [_counted(recent, first, decodings) for _ in range(4)]
    assert decodings == [first, first] and seen[2] == seen[3] == [first] and seen[2] is not seen[3]
    assert _counted(recent, second, decodings) == [second] and recent.kept_bytes == 201
    assert _counted(recent, first, decodings) == [first] and decodings == [first, first, second, first]
