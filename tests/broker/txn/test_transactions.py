"""Transactions over the wire with real clients: confluent-kafka (librdkafka), kafka-python,
aiokafka and kcat against one real broker; read_committed against read_uncommitted; zombie
fencing; the broker's own abort of a transaction past its timeout; bad input answered with
Kafka's error codes. Ground truth is the list of values each test committed."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from kafka import KafkaProducer
from kafka.protocol.consumer.group import OffsetFetchRequest
from kafka.protocol.producer import (AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest,
                                     ProduceRequest, TxnOffsetCommitRequest)

from headwater.demo.payments import read_to_end
from headwater.protocol.errors import ErrorCode
from headwater.records import Record, encode_batch
from headwater.records.layout import ATTR_TRANSACTIONAL
from headwater.testing import BrokerProcess

from tests.support.clients import kcat, stable_end
from tests.support.wire import Wire

PARTITIONS = 3


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("txn") / "data", "--num-partitions", str(PARTITIONS)).start()
    yield proc
    proc.stop()


def fresh(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def read_all(bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    return read_to_end(bootstrap, topic, isolation)


def transactional(bootstrap: str, txn_id: str, **config) -> Producer:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "linger.ms": 5, **config})
    producer.init_transactions(30)
    return producer


def send_transaction(producer: Producer, topic: str, values: list[bytes], commit: bool) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, value=value, partition=i % PARTITIONS)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.flush(30)   # the records are in the log before the abort
        producer.abort_transaction(30)


def test_confluent_kafka_commits_and_aborts_across_three_partitions(broker):
    topic = fresh("orders")
    producer = transactional(broker.bootstrap, fresh("tx"))
    committed, aborted = [], []
    for round_ in range(4):
        values = [f"{round_}-{i}".encode() for i in range(3 * PARTITIONS)]
        commit = round_ % 2 == 0
        send_transaction(producer, topic, values, commit)
        (committed if commit else aborted).extend(values)
    assert sorted(read_all(broker.bootstrap, topic, "read_committed")) == sorted(committed)
    assert sorted(read_all(broker.bootstrap, topic, "read_uncommitted")) == sorted(committed + aborted)
    # kcat (librdkafka 2.0.2) reads read_committed by default
    out = kcat("-b", broker.bootstrap, "-C", "-t", topic, "-e", "-q", "-f", "%s\n")
    assert sorted(out.split()) == sorted(committed)


def test_an_open_transaction_holds_back_read_committed_readers(broker):
    topic = fresh("held")
    producer = transactional(broker.bootstrap, fresh("tx"))
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"after", partition=0)
    assert plain.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": fresh("g"),
                         "isolation.level": "read_committed"})
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    assert (low, high) == (0, 0)    # librdkafka asks ListOffsets under read_committed: the LSO
    assert read_all(broker.bootstrap, topic, "read_committed") == []
    producer.commit_transaction(30)
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"pending", b"after"]
    assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (0, 3)  # data, marker, data
    consumer.close()


def test_a_second_producer_with_the_same_id_fences_the_first(broker):
    topic, txn_id = fresh("fenced"), fresh("tx")
    zombie = transactional(broker.bootstrap, txn_id)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", partition=0)
    zombie.flush(30)
    successor = transactional(broker.bootstrap, txn_id)
    send_transaction(successor, topic, [b"successor"], commit=True)
    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(30)
    assert raised.value.args[0].fatal()
    assert raised.value.args[0].code() in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH, -144)
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"successor"]


def test_kafka_python_transactions_commit_and_abort(broker):
    topic = fresh("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=fresh("tx"))
    producer.init_transactions()
    for value, commit in ((b"kp-1", True), (b"kp-2", False), (b"kp-3", True)):
        producer.begin_transaction()
        producer.send(topic, value=value, partition=1)
        producer.flush()
        producer.commit_transaction() if commit else producer.abort_transaction()
    producer.close()
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"kp-1", b"kp-3"]


def test_aiokafka_transactions_commit_and_abort(broker):
    topic = fresh("aio")

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=fresh("tx"))
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-1", partition=2)
            with pytest.raises(RuntimeError):
                async with producer.transaction():
                    await producer.send_and_wait(topic, b"aio-2", partition=2)
                    raise RuntimeError("abort")
            async with producer.transaction():
                await producer.send_and_wait(topic, b"aio-3", partition=2)
        finally:
            await producer.stop()
    asyncio.run(run())
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"aio-1", b"aio-3"]


VANISHING_PRODUCER = textwrap.dedent("""
    import os, sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                  "transaction.timeout.ms": 2000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(sys.argv[3], value=b"abandoned", partition=0)
    p.flush(30)
    os._exit(0)   # gone mid-transaction, never to come back (a random id per process, as quixstreams does)
""")


def test_the_broker_aborts_a_transaction_past_its_timeout(broker):
    topic = fresh("vanish")
    subprocess.run([sys.executable, "-c", VANISHING_PRODUCER, broker.bootstrap, fresh("tx"), topic], check=True,
                   timeout=120)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce(topic, value=b"later", partition=0)
    assert plain.flush(30) == 0
    # read_committed sees "later" only once the broker has aborted the abandoned transaction
    deadline = time.monotonic() + 60
    while (values := read_all(broker.bootstrap, topic, "read_committed")) == [] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert values == [b"later"]
    assert sorted(read_all(broker.bootstrap, topic, "read_uncommitted")) == [b"abandoned", b"later"]


def test_bad_transactional_requests_get_kafkas_error_codes(broker):
    topic, txn_id = fresh("bad"), fresh("tx")
    Producer({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30)  # auto-creates it
    wire = Wire(broker.bootstrap)
    try:
        init = wire.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000), 1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert init.error_code == 0 and pid >= 0

        def add(topics, producer_epoch=epoch):
            response = wire.request(AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=producer_epoch, v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in topics]), 1)
            return {(t.name, p.partition_index): p.partition_error_code
                    for t in response.results_by_topic_v3_and_below for p in t.results_by_partition}

        assert add([("no-such-topic", [0]), (topic, [0])]) == {("no-such-topic", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                                               (topic, 0): ErrorCode.OPERATION_NOT_ATTEMPTED}
        assert add([(topic, [0])]) == {(topic, 0): 0}

        def produce(partition, transactional_id=txn_id, before=b""):
            batch = encode_batch([Record(0, int(time.time() * 1000), None, b"x")], producer_id=pid,
                                 producer_epoch=epoch, base_sequence=0, attributes=ATTR_TRANSACTIONAL)
            Data = ProduceRequest.TopicProduceData
            response = wire.request(ProduceRequest(transactional_id=transactional_id, acks=-1, timeout_ms=30000,
                                                   topic_data=[Data(name=topic, partition_data=[
                                                       Data.PartitionProduceData(index=partition,
                                                                                 records=before + batch)])]), 7)
            return response.responses[0].partition_responses[0].error_code

        assert produce(1) == ErrorCode.INVALID_TXN_STATE      # partition 1 was never added
        plain = encode_batch([Record(0, int(time.time() * 1000), None, b"plain")])
        assert produce(0, None, before=plain) == ErrorCode.INVALID_REQUEST  # a transactional batch behind a plain one
        assert produce(0) == 0

        TopicOffsets = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        stale_commit = TxnOffsetCommitRequest(
            transactional_id=txn_id, group_id="nobody-group", producer_id=pid, producer_epoch=epoch,
            generation_id=5, member_id="m", group_instance_id=None, topics=[TopicOffsets(name=topic, partitions=[
                TopicOffsets.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1,
                                                             committed_leader_epoch=-1, committed_metadata="")])])
        stale = wire.request(stale_commit, 3)
        assert stale.topics[0].partitions[0].error_code == ErrorCode.INVALID_TXN_STATE  # AddOffsetsToTxn first
        added = wire.request(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                                    group_id="nobody-group"), 0)
        assert added.error_code == 0
        stale = wire.request(stale_commit, 3)
        assert stale.topics[0].partitions[0].error_code == ErrorCode.UNKNOWN_MEMBER_ID  # no such member (KIP-447)

        fenced = wire.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch - 1,
                                            committed=True), 0)
        assert fenced.error_code == ErrorCode.INVALID_PRODUCER_EPOCH       # v0-1 hear the older code
        fenced = wire.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch - 1,
                                            committed=True), 3)
        assert fenced.error_code == ErrorCode.PRODUCER_FENCED
        # the coordinator is as it was: the real producer commits what it wrote
        ok = wire.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                        committed=True), 3)
        assert ok.error_code == 0
    finally:
        wire.close()
    assert read_all(broker.bootstrap, topic, "read_committed") == [b"x"]


def headwater_cli(broker, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "headwater", "transactions", *args, "--bootstrap-server",
                           broker.bootstrap], capture_output=True, text=True, timeout=120)


def test_cli_lists_and_describes_transactions(broker):
    topic, txn_id = fresh("cli"), fresh("tx")
    producer = transactional(broker.bootstrap, txn_id)
    producer.begin_transaction()
    for partition in (0, 2):
        producer.produce(topic, value=b"open", partition=partition)
    producer.flush(30)
    listed = json.loads(headwater_cli(broker, "list", "--json").stdout)
    mine = [row for row in listed if row["transactional_id"] == txn_id]
    assert len(mine) == 1 and mine[0]["state"] == "Ongoing" and mine[0]["partitions"] == [f"{topic}-0", f"{topic}-2"]
    assert mine[0]["age_s"] >= 0
    producer.commit_transaction(30)
    (described,) = json.loads(headwater_cli(broker, "describe", txn_id, "--json").stdout)
    assert (described["state"], described["partitions"], described["age_s"]) == ("CompleteCommit", [], None)
    assert [described[k] for k in ("producer_id", "producer_epoch")] == [mine[0][k] for k in ("producer_id",
                                                                                             "producer_epoch")]
    missing = headwater_cli(broker, "describe", "no-such-id")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "headwater: error: no transactional id no-such-id is known to the coordinator"


def test_write_txn_markers_refuses_a_stale_epoch_and_an_unknown_partition(broker):
    """WriteTxnMarkers (what `kafka-transactions abort` sends): a marker older than the producer's
    epoch in the partition is refused and the transaction stays open; the current epoch ends it."""
    from kafka.protocol.producer import WriteTxnMarkersRequest
    topic, txn_id = fresh("markers"), fresh("tx")
    Producer({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30)  # auto-creates it
    producer = transactional(broker.bootstrap, txn_id)
    producer.close()
    producer = transactional(broker.bootstrap, txn_id)   # a second init: epoch 1
    producer.begin_transaction()
    producer.produce(topic, value=b"hanging", partition=0)
    producer.flush(30)
    Marker = WriteTxnMarkersRequest.WritableTxnMarker
    wire = Wire(broker.bootstrap)
    try:
        [pid] = {p.producer_id for p in _producers(wire, topic)}

        def write_markers(epoch, *topics):
            response = wire.request(WriteTxnMarkersRequest(markers=[Marker(
                producer_id=pid, producer_epoch=epoch, transaction_result=False, coordinator_epoch=0,
                topics=[Marker.WritableTxnMarkerTopic(name=t, partition_indexes=[0]) for t in topics])]), 1)
            return {t.name: p.error_code for m in response.markers for t in m.topics for p in t.partitions}

        assert write_markers(0, topic, "no-such-topic") == {topic: ErrorCode.INVALID_PRODUCER_EPOCH,
                                                            "no-such-topic": ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        assert stable_end(broker.bootstrap, topic) == 0
        assert write_markers(1, topic) == {topic: 0}
        assert stable_end(broker.bootstrap, topic) == 2   # the record and the abort marker
    finally:
        wire.close()
        producer.abort_transaction(30)
    assert read_all(broker.bootstrap, topic, "read_committed") == []


def _producers(wire, topic):
    from kafka.protocol.admin import DescribeProducersRequest
    response = wire.request(DescribeProducersRequest(topics=[DescribeProducersRequest.TopicRequest(
        name=topic, partition_indexes=[0])]), 0)
    return response.topics[0].partitions[0].active_producers


def test_offset_fetch_with_require_stable_waits_for_the_transaction_holding_offsets(broker):
    """OffsetFetch v7 (KIP-447), as Java's read_committed consumers send it (Kafka Streams with
    exactly_once_v2): a partition whose offset an open transaction holds is UNSTABLE_OFFSET_COMMIT
    with require_stable, the last committed offset without; once the transaction commits, its offset."""
    topic, txn_id, group = fresh("stable"), fresh("tx"), fresh("stable-group")
    Producer({"bootstrap.servers": broker.bootstrap}).list_topics(topic, timeout=30)  # auto-creates it
    wire = Wire(broker.bootstrap)
    try:
        init = wire.request(InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000), 1)
        pid, epoch = init.producer_id, init.producer_epoch
        assert wire.request(AddOffsetsToTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                                   group_id=group), 0).error_code == 0
        Offsets = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
        committed = wire.request(TxnOffsetCommitRequest(
            transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch, generation_id=-1,
            member_id="", group_instance_id=None, topics=[Offsets(name=topic, partitions=[
                Offsets.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5,
                                                        committed_leader_epoch=-1, committed_metadata="")])]), 3)
        assert committed.topics[0].partitions[0].error_code == 0

        def fetch(require_stable: bool) -> dict[int, tuple[int, int]]:
            Topic = OffsetFetchRequest.OffsetFetchRequestTopic
            response = wire.request(OffsetFetchRequest(group_id=group, require_stable=require_stable,
                                                       topics=[Topic(name=topic, partition_indexes=[0, 1])]), 7)
            assert response.error_code == 0
            return {p.partition_index: (p.error_code, p.committed_offset) for p in response.topics[0].partitions}

        assert fetch(require_stable=True) == {0: (ErrorCode.UNSTABLE_OFFSET_COMMIT, -1), 1: (0, -1)}
        assert fetch(require_stable=False) == {0: (0, -1), 1: (0, -1)}
        assert wire.request(EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
                                          committed=True), 3).error_code == 0
        assert fetch(require_stable=True) == {0: (0, 5), 1: (0, -1)}
    finally:
        wire.close()
