"""A sessionless fetch of many partitions (librdkafka's) answers its quiet partitions all at
once (fetch_apis._read_spliced): its bytes are the per-partition path's, and it never answers
an offset that has moved."""
from __future__ import annotations

import asyncio

import pytest
from kafka.protocol.consumer import FetchRequest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.fetch_apis import fetch
from headwater.broker.log_admin_apis import delete_records
from headwater.protocol.fetch_request import decode_fetch_request
from headwater.protocol.fetch_response import FetchedPartition, FetchedTopic, FetchResponse, SplicedTopic
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey, RequestHeader
from headwater.records import Record, encode_batch

PARTITIONS = 100
DeleteRecords = MESSAGE_CLASSES[ApiKey.DELETE_RECORDS][0]


def generated_request(version: int, offsets: list[int], isolation: int, max_bytes: int = 1 << 20):
    F = FetchRequest[version]
    fields = dict(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=max_bytes, topics=[F.FetchTopic(
        topic="t", partitions=[F.FetchTopic.FetchPartition(partition=p, current_leader_epoch=-1, fetch_offset=offset,
                                                           log_start_offset=-1, partition_max_bytes=1 << 20)
                               for p, offset in enumerate(offsets)])])
    if version >= 4:
        fields["isolation_level"] = isolation
    if version >= 7:
        fields.update(session_id=0, session_epoch=-1, forgotten_topics_data=[])
    if version >= 11:
        fields["rack_id"] = ""
    return F(**fields)


async def answer(broker, version: int, request):
    """The fetch's response, encoded: the spliced path for a request decoded by hand (it keeps
    the partitions' bytes), the per-partition path for kafka-python's object of the same request."""
    response = await fetch(broker, RequestHeader(ApiKey.FETCH, version, 1, "test"), request)
    return response, response.encode(version)


def append(broker, partition: int, count: int) -> None:
    records = [Record(i, 1_700_000_000_000, b"k", b"v%d" % i) for i in range(count)]
    assert broker.appender.append("t", partition, encode_batch(records)).error == 0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One topic of 100 partitions: 3, 50 and 99 hold records, 7's log start moved to 1."""
    loop = asyncio.new_event_loop()
    broker = Broker(BrokerConfig(data_dir=tmp_path_factory.mktemp("spliced")))
    broker.log_manager.create_topic("t", PARTITIONS)
    for partition, count in [(3, 2), (50, 1), (99, 3), (7, 2)]:
        append(broker, partition, count)
    deleted = DeleteRecords(topics=[DeleteRecords.DeleteRecordsTopic(name="t", partitions=[
        DeleteRecords.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=7, offset=1)])], timeout_ms=0)
    loop.run_until_complete(delete_records(broker, RequestHeader(21, 2, 2, "test"), deleted))
    yield broker, loop
    broker.close()
    loop.close()


@pytest.mark.parametrize("version", [4, 5, 7, 9, 11])
@pytest.mark.parametrize("isolation", [0, 1])
@pytest.mark.parametrize("max_bytes", [1 << 20, 1])
def test_spliced_bytes_are_the_per_partition_paths(broker, version, isolation, max_bytes):
    broker, loop = broker
    ends = [broker.log_manager.topics["t"].partitions[p].log_end_offset for p in range(PARTITIONS)]
    offsets = list(ends)
    offsets[3], offsets[99], offsets[20] = 0, 1, 5    # records to read; 20: out of range
    general = generated_request(version, offsets, isolation, max_bytes)
    spliced = decode_fetch_request(general.encode(version=version), version)
    ours, ours_bytes = loop.run_until_complete(answer(broker, version, spliced))
    theirs, theirs_bytes = loop.run_until_complete(answer(broker, version, general))
    assert type(ours.responses[0]) is SplicedTopic and type(theirs.responses[0]) is not SplicedTopic
    assert ours_bytes == theirs_bytes
    decoded = MESSAGE_CLASSES[ApiKey.FETCH][1].decode(ours_bytes, version=version).responses[0].partitions
    assert [(p.partition_index, p.high_watermark) for p in decoded] == list(enumerate(ends))
    assert [p.partition_index for p in decoded if p.records] == ([3] if max_bytes == 1 else [3, 99])
    assert [p.partition_index for p in decoded if p.error_code] == [20]   # OFFSET_OUT_OF_RANGE
    if version >= 5:   # v4 carries no log start offset, and the spliced entries hold none
        assert ours.responses[0].partitions == theirs.responses[0].partitions


def test_a_partition_that_moved_between_two_fetches_shows_it(broker):
    broker, loop = broker
    logs = broker.log_manager.topics["t"].partitions
    ends = [log.log_end_offset for log in logs]
    request = generated_request(11, ends, 0).encode(version=11)
    first, _ = loop.run_until_complete(answer(broker, 11, decode_fetch_request(request, 11)))
    append(broker, 42, 1)
    deleted = DeleteRecords(topics=[DeleteRecords.DeleteRecordsTopic(name="t", partitions=[
        DeleteRecords.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=99, offset=2)])], timeout_ms=0)
    loop.run_until_complete(delete_records(broker, RequestHeader(21, 2, 2, "test"), deleted))
    second, _ = loop.run_until_complete(answer(broker, 11, decode_fetch_request(request, 11)))
    before = {p.partition_index: p for p in first.responses[0].partitions}
    after = {p.partition_index: p for p in second.responses[0].partitions}
    assert (before[42].high_watermark, after[42].high_watermark) == (ends[42], ends[42] + 1)
    assert after[42].records   # the fetch offset is the old end: the new record is read
    assert (before[99].log_start_offset, after[99].log_start_offset) == (0, 2)
    assert {p: (a.high_watermark, a.log_start_offset) for p, a in after.items() if p not in (42, 99)} == \
        {p: (b.high_watermark, b.log_start_offset) for p, b in before.items() if p not in (42, 99)}


def test_a_spliced_topic_whose_answer_is_replaced_encodes_the_replacement(broker):
    """The authorization rule answers a denied topic by replacing its partitions (fetch_rule)."""
    broker, loop = broker
    ends = [log.log_end_offset for log in broker.log_manager.topics["t"].partitions]
    request = decode_fetch_request(generated_request(11, ends, 0).encode(version=11), 11)
    response, _ = loop.run_until_complete(answer(broker, 11, request))
    denied = [FetchedPartition(p, 29, -1, -1, -1, None, -1, None) for p in range(PARTITIONS)]   # TOPIC_AUTHORIZATION_FAILED
    response.responses[0].partitions = denied
    assert response.encode(11) == FetchResponse(0, 0, 0, [FetchedTopic("t", denied)]).encode(11)


@pytest.mark.parametrize("isolation", [0, 1])
def test_an_open_transaction_holds_back_the_last_stable_offset_as_on_the_per_partition_path(broker, isolation):
    """A transaction opened after the topic's first fetch: the spliced answer's last stable offset
    of that partition is its first unstable offset, as the per-partition path answers it."""
    broker, loop = broker
    plog = broker.log_manager.topics["t"].partitions[99]
    ends = [log.log_end_offset for log in broker.log_manager.topics["t"].partitions]
    general = generated_request(11, ends, isolation)
    request = general.encode(version=11)
    loop.run_until_complete(answer(broker, 11, decode_fetch_request(request, 11)))
    plog.first_unstable_offset = ends[99] - 1   # what TxnPartitions sets as a transaction's first batch goes in
    try:
        ours, ours_bytes = loop.run_until_complete(answer(broker, 11, decode_fetch_request(request, 11)))
        _, theirs_bytes = loop.run_until_complete(answer(broker, 11, general))
    finally:
        plog.first_unstable_offset = None
    assert type(ours.responses[0]) is SplicedTopic and ours_bytes == theirs_bytes
    assert {p.partition_index: p.last_stable_offset for p in ours.responses[0].partitions}[99] == ends[99] - 1


def waiting_broker(tmp_path) -> Broker:
    """A topic of 100 partitions, 5 and 60 holding records, and a topic of 2 (fetched narrow)."""
    broker = Broker(BrokerConfig(data_dir=tmp_path))
    broker.log_manager.create_topic("t", PARTITIONS)
    broker.log_manager.create_topic("narrow", 2)
    for partition in (5, 60):
        append(broker, partition, 2)
    return broker


def caught_up_request(broker, isolation: int, max_wait_ms: int):
    """librdkafka's fetch of both topics at their ends, and kafka-python's object of the same request."""
    F = FetchRequest[11]
    general = F(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, isolation_level=isolation,
                session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[F.FetchTopic(
                    topic=name, partitions=[F.FetchTopic.FetchPartition(
                        partition=p, current_leader_epoch=-1, fetch_offset=log.log_end_offset, log_start_offset=-1,
                        partition_max_bytes=1 << 20) for p, log in enumerate(broker.log_manager.topics[name].partitions)])
                    for name in ("t", "narrow")])
    return decode_fetch_request(general.encode(version=11), 11), general


async def _waits(task, wakeups) -> None:
    """Until the fetch waits on its growth signals."""
    for _ in range(1000):
        if len(wakeups) and not task.done():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the fetch did not wait")


def test_a_caught_up_fetch_whose_time_runs_out_answers_the_logs_as_they_stand(tmp_path):
    """Nothing to read until max_wait_ms: the answer carries the log start that moved while it waited
    (DeleteRecords wakes it; it reads, finds nothing and waits on), byte for byte the per-partition path's."""
    broker = waiting_broker(tmp_path)

    async def scenario():
        request, general = caught_up_request(broker, 1, 200)
        waiting = asyncio.create_task(fetch(broker, RequestHeader(ApiKey.FETCH, 11, 1, "test"), request))
        await _waits(waiting, broker.wakeups)
        deleted = DeleteRecords(topics=[DeleteRecords.DeleteRecordsTopic(name="t", partitions=[
            DeleteRecords.DeleteRecordsTopic.DeleteRecordsPartition(partition_index=5, offset=2)])], timeout_ms=0)
        await delete_records(broker, RequestHeader(21, 2, 2, "test"), deleted)
        ours = await asyncio.wait_for(waiting, 30)
        general.max_wait_ms = 0
        return ours, await fetch(broker, RequestHeader(ApiKey.FETCH, 11, 1, "test"), general)

    ours, theirs = asyncio.run(scenario())
    broker.close()
    assert type(ours.responses[0]) is SplicedTopic and ours.encode(11) == theirs.encode(11)
    assert not any(p.records for t in ours.responses for p in t.partitions)
    assert ours.responses[0].partitions[5].log_start_offset == 2


@pytest.mark.parametrize("where", ["wide out of range", "narrow out of range", "unknown partition"])
def test_a_fetch_with_something_to_answer_does_not_wait(tmp_path, where):
    """Caught up but for one partition: an offset past a wide or a narrow topic's end, or a partition
    that does not exist, is answered at once (its error), however long the fetch may wait."""
    broker = waiting_broker(tmp_path)

    async def scenario():
        request, _ = caught_up_request(broker, 0, 30_000)
        wide, narrow = request.topics
        F = FetchRequest[11].FetchTopic
        if where == "wide out of range":
            offsets = [log.log_end_offset for log in broker.log_manager.topics["t"].partitions]
            offsets[70] += 1
            wide.partitions = decode_fetch_request(generated_request(11, offsets, 0).encode(version=11), 11).topics[0].partitions
        else:
            partition = 1 if where == "narrow out of range" else 2
            narrow.partitions = [F.FetchPartition(partition=partition, current_leader_epoch=-1, fetch_offset=1,
                                                  log_start_offset=-1, partition_max_bytes=1 << 20)]
        answering = asyncio.create_task(fetch(broker, RequestHeader(ApiKey.FETCH, 11, 1, "test"), request))
        await asyncio.sleep(0)
        assert answering.done()   # in its first step: no wait
        return answering.result()

    response = asyncio.run(scenario())
    broker.close()
    errors = {(t.topic, p.partition_index): p.error_code for t in response.responses for p in t.partitions if p.error_code}
    assert errors == {"wide out of range": {("t", 70): 1}, "narrow out of range": {("narrow", 1): 1},
                      "unknown partition": {("narrow", 2): 3}}[where]   # OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION


def test_a_fetch_answered_at_once_sets_up_no_watch_and_one_that_waits_is_woken_by_the_next_append(tmp_path):
    """The watch is set up after the first read, only for a fetch that must wait (most of librdkafka's
    are answered at once); the append that comes right after that read still wakes it."""
    broker = waiting_broker(tmp_path)
    watches = []
    signals_watch = broker.wakeups.watch
    broker.wakeups.watch = lambda *args: watches.append(args) or signals_watch(*args)

    async def scenario():
        request, _ = caught_up_request(broker, 0, 30_000)
        waiting = asyncio.create_task(fetch(broker, RequestHeader(ApiKey.FETCH, 11, 1, "test"), request))
        await asyncio.sleep(0)   # its first step: the read, and the wait
        assert len(watches) == 1 and not waiting.done()
        append(broker, 42, 1)
        woken = await asyncio.wait_for(waiting, 30)
        behind = generated_request(11, [0] * PARTITIONS, 0)
        behind.max_wait_ms = 30_000
        answered = await fetch(broker, RequestHeader(ApiKey.FETCH, 11, 1, "test"),
                               decode_fetch_request(behind.encode(version=11), 11))
        return woken, answered

    woken, answered = asyncio.run(scenario())
    broker.close()
    assert len(watches) == 1   # the second fetch had records to answer: no watch
    assert [p.partition_index for p in woken.responses[0].partitions if p.records] == [42]
    assert [p.partition_index for p in answered.responses[0].partitions if p.records] == [5, 42, 60]
    assert len(broker.wakeups) == 0
