"""What enters the log is validated (issue 10): bad batches are refused with INVALID_RECORD,
internal topics refuse clients, a poisoned __consumer_offsets never stops the broker from
starting, and a poisoned compacted log does not stop the cleaner for the others. Each time
the broker keeps serving and a canary topic is byte-for-byte intact."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kafka import KafkaConsumer, TopicPartition as KafkaPythonPartition

from headwater import records
from headwater.broker.groups.store import OFFSETS_TOPIC, offset_key
from headwater.records import Compression, Record, encode_batch, layout
from headwater.testing import BrokerProcess, rebuilt_batch as rebuilt, wait_until, zstd_bomb

from tests.support.clients import committed_offset
from tests.support.logview import create_topic, produce_rounds, read_all, watermarks
from tests.broker.test_bad_input import batch, fetch, produce, seeded  # noqa: F401  (seeded: the canary fixture)
from tests.log.test_compaction import COMPACTED, roll_with_marker
from tests.support.wire import Wire

INVALID_RECORD, INVALID_TOPIC_EXCEPTION = 87, 17
T0 = 1_700_000_000_000


GOOD = batch(b"v")
BAD_BATCHES = {
    # the offset delta 0 written in 6 bytes: Kafka's int32 varints have at most 5
    "bad varint": rebuilt(GOOD, b"\x1a\x00\x00" + b"\x80" * 5 + b"\x00" + GOOD[layout.HEADER_SIZE + 4:]),
    "codec 7": rebuilt(GOOD, attributes=7),
    "corrupt snappy": rebuilt(GOOD, b"\x10\xff\xff\xff\xff\xff\x00", attributes=int(Compression.SNAPPY)),
    "control batch": rebuilt(GOOD, b"\x00\x07garbage", attributes=layout.ATTR_CONTROL),
    "count mismatch": rebuilt(GOOD, records_count=3, last_offset_delta=2),
    "offset delta": encode_batch([Record(1, T0, b"k", b"v"), Record(1, T0, b"k", b"w")]),  # deltas 1, 1
    "trailing bytes": rebuilt(GOOD, GOOD[layout.HEADER_SIZE:] + b"\x00\x00"),
}


@pytest.mark.parametrize("name", list(BAD_BATCHES))
def test_bad_batches_are_refused_and_nothing_appended(seeded, name):  # noqa: F811
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    assert produce(wire, "plain", 0, batch(b"before")).error_code == 0
    refused = produce(wire, "plain", 0, BAD_BATCHES[name])
    assert refused.error_code == INVALID_RECORD, name
    assert produce(wire, "plain", 0, batch(b"after")).error_code == 0  # same connection goes on
    part = fetch(wire, "plain", 0, 0)
    assert part.high_watermark == 2
    assert [r.value for r in records.decode_records(part.records)[1]] == [b"before"]
    intact()


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_a_wrong_max_timestamp_is_rewritten_not_refused(seeded, codec):  # noqa: F811
    # librdkafka writes max timestamp 0 over records that carry -1; Kafka rewrites the field
    broker, intact = seeded
    stamps = [(-1, -1), (T0 + 5, T0)]
    batches = [encode_batch([Record(i, t, b"k%d" % i, b"v") for i, t in enumerate(ts)], compression=codec)
               for ts in stamps]
    wire = Wire(broker.bootstrap)
    for batch_, header_max in zip(batches, (0, T0 + 6)):
        assert produce(wire, "stamps", 0, rebuilt(batch_, max_timestamp=header_max)).error_code == 0
    stored = fetch(wire, "stamps", 0, 0).records
    stored_batches = list(records.iter_batches(stored))  # validates each stored CRC
    assert [h.max_timestamp for _, h in stored_batches] == [-1, T0 + 5]
    # the batches as encode_batch seals them from their records, past the fields the broker stamps
    assert [stored[pos + layout.MAGIC_AT:pos + h.size] for pos, h in stored_batches] == \
        [b[layout.MAGIC_AT:] for b in batches]
    expected = [t for ts in stamps for t in ts]
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    consumer.assign([TopicPartition("stamps", 0, OFFSET_BEGINNING)])
    read = []
    while len(read) < len(expected):
        message = consumer.poll(30)
        assert message is not None and message.error() is None
        read.append(message.timestamp()[1])
    consumer.close()
    assert read == expected
    reader = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None, consumer_timeout_ms=30000)
    reader.assign([KafkaPythonPartition("stamps", 0)])
    reader.seek_to_beginning()
    assert [next(reader).timestamp for _ in expected] == expected
    reader.close()
    # as Kafka, a record without a timestamp is not out of a topic's timestamp bounds
    create_topic(broker.bootstrap, "bounded", **{"message.timestamp.before.max.ms": "3600000"})
    assert produce(wire, "bounded", 0, rebuilt(batches[0], max_timestamp=0)).error_code == 0
    intact()


def test_a_decompression_bomb_is_refused_without_the_memory(seeded):  # noqa: F811
    broker, intact = seeded
    create_topic(broker.bootstrap, "compacted", **{"cleanup.policy": "compact"})
    bomb = zstd_bomb(1 << 30)
    assert len(bomb) < 64 << 10
    wire = Wire(broker.bootstrap)
    for topic in ("plain", "compacted"):
        assert produce(wire, topic, 0, bomb).error_code == INVALID_RECORD
        assert fetch(wire, topic, 0, 0).high_watermark == 0
    status = Path(f"/proc/{broker.proc.pid}/status").read_text()
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    assert peak_kb < 400 << 10, f"broker peak RSS {peak_kb} kB"  # the bomb would need 1 GiB
    intact()


def test_clients_cannot_produce_to_internal_topics(seeded):  # noqa: F811
    broker, intact = seeded
    wire = Wire(broker.bootstrap)
    refused = produce(wire, OFFSETS_TOPIC, 0, batch())
    assert refused.error_code == INVALID_TOPIC_EXCEPTION
    outcome = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    producer.produce(OFFSETS_TOPIC, key=b'{"group":"x"}', value=b"1", on_delivery=lambda err, msg: outcome.append(err))
    producer.flush(30)
    assert outcome and outcome[0] is not None and outcome[0].code() == KafkaError.TOPIC_EXCEPTION
    intact()


def _log_end(segment: Path) -> int:
    data = segment.read_bytes()
    return max(h.last_offset for _, h in records.iter_batches(data, validate=False)) + 1


def test_a_poisoned_offsets_topic_never_stops_the_broker_from_starting(tmp_path):
    proc = BrokerProcess(tmp_path / "data").start()
    try:
        produce_rounds(proc.bootstrap, "orders", [[(b"k", b"v%d" % i) for i in range(5)]])
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "billing"})
        consumer.commit(offsets=[TopicPartition("orders", 0, 4)], asynchronous=False)
        consumer.close()
    finally:
        proc.stop()

    segment = sorted((tmp_path / "data" / f"{OFFSETS_TOPIC}-0").glob("*.log"))[-1]
    offset = _log_end(segment)
    key = offset_key("billing", "orders", 0)
    value = json.dumps({"offset": 1, "leader_epoch": -1, "metadata": "", "commit_timestamp": T0},
                       separators=(",", ":")).encode()
    poison = [
        rebuilt(encode_batch([Record(0, T0, b"k", b"v")]), b"\x00\x07garbage", attributes=layout.ATTR_CONTROL),
        encode_batch([Record(0, T0, key, value.replace(b'"offset":1', b'"offset":Infinity'))]),
        encode_batch([Record(0, T0, b"[" * 100_000 + b"]" * 100_000, value)]),
        encode_batch([Record(0, T0, b"not json", b"{")]),
        rebuilt(encode_batch([Record(0, T0, key, value)]), b"\x04\x00\x80"),  # records that do not parse
        rebuilt(encode_batch([Record(0, T0, key, value)]), attributes=7),  # an unknown codec
        # after the poison, a valid commit of another group: replay must go on past the bad records
        encode_batch([Record(0, T0, offset_key("audit", "orders", 0), value.replace(b'"offset":1', b'"offset":3'))]),
    ]
    with open(segment, "ab") as f:
        for raw in poison:
            stamped = bytearray(raw)
            layout.set_base_offset(stamped, 0, offset)
            f.write(stamped)
            offset += records.read_header(stamped).records_count

    with BrokerProcess(tmp_path / "data") as proc:
        assert committed_offset(proc.bootstrap, "billing", "orders") == 4
        assert committed_offset(proc.bootstrap, "audit", "orders") == 3
        produce_rounds(proc.bootstrap, "orders", [[(b"k", b"after")]])
        assert [v for _, _, v in read_all(proc.bootstrap, "orders")][-1] == b"after"
    assert "skipping unreadable" in proc.log_file.read_text()


def test_a_poisoned_compacted_log_does_not_stop_the_cleaner_for_the_others(tmp_path):
    proc = BrokerProcess(tmp_path / "data", "--cleaner-interval-ms", "100").start()
    try:
        create_topic(proc.bootstrap, "a-poisoned", **COMPACTED)  # first: the cleaner reaches it first
        create_topic(proc.bootstrap, "b-healthy", **COMPACTED)
        produce_rounds(proc.bootstrap, "a-poisoned", [[(b"k", b"v")]])
    finally:
        proc.stop()
    segment = sorted((tmp_path / "data" / "a-poisoned-0").glob("*.log"))[-1]
    poison = bytearray(rebuilt(encode_batch([Record(0, T0, b"k", b"v")]), b"\x00\x07garbage",
                               attributes=layout.ATTR_CONTROL))
    layout.set_base_offset(poison, 0, _log_end(segment))
    with open(segment, "ab") as f:
        f.write(poison)

    proc.start()
    try:
        roll_with_marker(proc.bootstrap, "a-poisoned", "roll")  # the poisoned segment is now cleanable
        sent = produce_rounds(proc.bootstrap, "b-healthy", [[(b"k%d" % k, b"round %d" % r) for k in range(5)]
                                                           for r in range(20)])
        sent += roll_with_marker(proc.bootstrap, "b-healthy", "roll")
        latest = {key: (offset, value) for offset, key, value in sent}
        expected = sorted((offset, key, value) for key, (offset, value) in latest.items())
        wait_until(lambda: read_all(proc.bootstrap, "b-healthy") == expected, what="the healthy log to be cleaned")
        assert watermarks(proc.bootstrap, "a-poisoned") == (0, 3)  # v, the poison, the marker: all kept
    finally:
        proc.stop()
    log_text = proc.log_file.read_text()
    assert log_text.count("a-poisoned-0 is uncleanable") == 1
