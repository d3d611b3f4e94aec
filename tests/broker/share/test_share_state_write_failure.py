"""ShareFetch and ShareAcknowledge in-process over a real broker whose ``__share_group_state``
fsync fails: as Kafka, the acknowledgements are answered with an error and undone (the records
stay acquired by their member, then come back at the lock's expiry); once the disk is back an
acknowledgement succeeds, and a restarted broker replays exactly what was made durable."""
from __future__ import annotations

import asyncio
import io

import pytest

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.share.partition import AcknowledgeType as Ack, Acquired, InFlight, RecordState
from headwater.broker.share.share_group_apis import share_acknowledge, share_fetch
from headwater.broker.share.state_records import STATE_TOPIC
from headwater.log import Log
from headwater.protocol.errors import ErrorCode
from headwater.protocol.share_fetch_response import VERSION
from headwater.protocol.share_messages import ShareAcknowledgeRequest, ShareFetchRequest
from headwater.protocol.share_messages import ShareFetchResponse as GeneratedShareFetchResponse
from headwater.records import Record, encode_batch

LOCK_MS = 30_000
FetchPartition = ShareFetchRequest.FetchTopic.FetchPartition
AckPartition = ShareAcknowledgeRequest.AcknowledgeTopic.AcknowledgePartition


@pytest.fixture
def disk(monkeypatch):
    """The state topic's fsync fails while ``disk["broken"]``; every other log's works."""
    state = {"broken": False}
    real_flush = Log.flush

    def flush(plog: Log) -> None:
        if state["broken"] and plog.directory.name == f"{STATE_TOPIC}-0":
            raise OSError(5, "Input/output error")
        real_flush(plog)
    monkeypatch.setattr(Log, "flush", flush)
    return state


def _broker(tmp_path, clock) -> Broker:
    return Broker(BrokerConfig(data_dir=tmp_path / "data", flush="always"), clock=clock)


def _fetch(topic_id, epoch: int, acks: list[tuple[int, int, Ack]]) -> ShareFetchRequest:
    batches = [FetchPartition.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[kind])
               for f, l, kind in acks]
    return ShareFetchRequest(group_id="g", member_id="a", share_session_epoch=epoch, max_wait_ms=0, min_bytes=1,
                             max_bytes=1 << 20, max_records=10, batch_size=10, forgotten_topics_data=[],
                             topics=[ShareFetchRequest.FetchTopic(topic_id=topic_id, partitions=[FetchPartition(
                                 partition_index=0, acknowledgement_batches=batches)])])


def _acknowledge(topic_id, epoch: int, acks: list[tuple[int, int, Ack]]) -> ShareAcknowledgeRequest:
    batches = [AckPartition.AcknowledgementBatch(first_offset=f, last_offset=l, acknowledge_types=[kind])
               for f, l, kind in acks]
    return ShareAcknowledgeRequest(group_id="g", member_id="a", share_session_epoch=epoch, topics=[
        ShareAcknowledgeRequest.AcknowledgeTopic(topic_id=topic_id, partitions=[AckPartition(
            partition_index=0, acknowledgement_batches=batches)])])


def _sent(response) -> tuple[int, list]:
    """(acknowledge error code, acquired records) of the one partition, as the bytes sent say."""
    decoded = GeneratedShareFetchResponse.decode(io.BytesIO(response.encode(VERSION)), version=VERSION)
    partition = decoded.responses[0].partitions[0]
    return partition.acknowledge_error_code, [tuple(a) for a in partition.acquired_records]


def test_acknowledgements_whose_state_write_fails_are_answered_with_an_error_and_undone(tmp_path, clock, disk):
    broker = _broker(tmp_path, clock)
    topic = broker.log_manager.create_topic("orders", 1)
    for _ in range(3):     # three batches of ten: a ShareFetch acquires whole batches
        broker.appender.append("orders", 0, encode_batch([Record(i, 0, None, b"v") for i in range(10)]),
                               flush_policy=False)
    broker.share.alter_configs("g", {"share.auto.offset.reset": "earliest",
                                     "share.record.lock.duration.ms": str(LOCK_MS)})
    broker.share.heartbeat("g", "a", 0, ["orders"])
    sp = broker.share.share_partition(broker.share.groups["g"], "orders", 0)
    tid = topic.topic_id

    async def requests():
        first = await share_fetch(broker, None, _fetch(tid, 0, []))
        assert first.responses[0].partitions[0].acquired_records == [Acquired(0, 9, 1)]
        disk["broken"] = True
        # ShareFetch: its acknowledgement fails, what it acquires meanwhile is still handed out
        second = await share_fetch(broker, None, _fetch(tid, 1, [(0, 4, Ack.ACCEPT), (5, 9, Ack.REJECT)]))
        assert _sent(second) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, [(10, 19, 1)])
        assert (sp.start_offset, sp.archived_total) == (0, 0)
        assert sp.records == {o: InFlight(RecordState.ACQUIRED, 1, "a") for o in range(20)}
        # ShareAcknowledge: a release that fails leaves the records with the member
        third = await share_acknowledge(broker, None, _acknowledge(tid, 2, [(10, 19, Ack.RELEASE)]))
        assert third.responses[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
        assert sp.records == {o: InFlight(RecordState.ACQUIRED, 1, "a") for o in range(20)}
        disk["broken"] = False
        fourth = await share_acknowledge(broker, None, _acknowledge(tid, 3, [(0, 9, Ack.ACCEPT)]))
        assert fourth.responses[0].partitions[0].error_code == ErrorCode.NONE

    try:
        asyncio.run(requests())
        assert sp.start_offset == 10
        clock.advance(LOCK_MS)     # the failed release's records come back when their lock expires
        assert sp.records == {o: InFlight(RecordState.AVAILABLE, 1, None) for o in range(10, 20)}
    finally:
        broker.close()

    broker = _broker(tmp_path, clock)     # what was made durable, and nothing the failed writes said
    try:
        sp = broker.share.share_partition(broker.share.groups["g"], "orders", 0)
        assert (sp.start_offset, sp.end_offset, sp.archived_total) == (10, 20, 0)
        assert sp.records == {o: InFlight(RecordState.AVAILABLE, 1, None) for o in range(10, 20)}
    finally:
        broker.close()


def test_a_broker_restarted_after_a_failed_write_replays_the_state_before_it(tmp_path, clock, disk):
    """The failed write is in the log file all the same (only its fsync failed): the state the
    acknowledgement is undone to is written after it, so a restart does not take it for done."""
    broker = _broker(tmp_path, clock)
    topic = broker.log_manager.create_topic("orders", 1)
    broker.appender.append("orders", 0, encode_batch([Record(i, 0, None, b"v") for i in range(10)]),
                           flush_policy=False)
    broker.share.alter_configs("g", {"share.auto.offset.reset": "earliest"})
    broker.share.heartbeat("g", "a", 0, ["orders"])

    async def requests():
        await share_fetch(broker, None, _fetch(topic.topic_id, 0, []))
        disk["broken"] = True
        answer = await share_acknowledge(broker, None, _acknowledge(topic.topic_id, 1, [(0, 9, Ack.ACCEPT)]))
        assert answer.responses[0].partitions[0].error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE

    try:
        asyncio.run(requests())
    finally:
        broker.close()
    disk["broken"] = False
    broker = _broker(tmp_path, clock)
    try:
        sp = broker.share.share_partition(broker.share.groups["g"], "orders", 0)
        assert sp.start_offset == 0
        assert sp.records == {o: InFlight(RecordState.AVAILABLE, 1, None) for o in range(10)}
    finally:
        broker.close()
