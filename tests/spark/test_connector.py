"""The `headwater` format against a real broker, fed and checked with confluent-kafka."""

import json

import pytest
from confluent_kafka import Producer
from tests.support.sparkdata import create_topic, headwater_batch, headwater_stream, produce, run_to_end

from headwater.log.manager import LogManager
from headwater.records import Compression, read_header
from headwater.spark.fetcher import Fetcher

T0 = 1_700_000_000_000


def records(n, partitions):
    """n records spread over the partitions, with distinct create timestamps; every
    fifth one carries headers."""
    return [(f"k{i}".encode(), f"v{i}".encode(), i % partitions,
             [("trace", f"t{i}".encode()), ("n", None)] if i % 5 == 0 else None, T0 + i * 1000)
            for i in range(n)]


def test_batch_read_between_offsets_with_headers(spark, broker):
    create_topic(broker.bootstrap, "orders", 3)
    sent = records(30, 3)
    produce(broker.bootstrap, "orders", sent)
    by_partition = {p: [r for r in sent if r[2] == p] for p in range(3)}

    df = headwater_batch(spark, broker.bootstrap, subscribe="orders", includeHeaders="true",
                         startingOffsets=json.dumps({"orders": {"0": 2, "1": -2, "2": 9}}),
                         endingOffsets=json.dumps({"orders": {"0": 7, "1": 4, "2": -1}}))
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value), r.timestamp.timestamp() * 1000,
                  r.timestampType, [(h.key, h.value and bytes(h.value)) for h in r.headers] if r.headers else None)
                 for r in df.collect())
    want = sorted((p, o, k, v, ts, 0, h)
                  for p, (lo, hi) in {0: (2, 7), 1: (0, 4), 2: (9, 10)}.items()
                  for o, (k, v, _, h, ts) in enumerate(by_partition[p]) if lo <= o < hi)
    assert got == want
    assert {r.topic for r in df.collect()} == {"orders"}


def test_batch_read_from_timestamp_and_assign(spark, broker):
    create_topic(broker.bootstrap, "clicks", 2)
    produce(broker.bootstrap, "clicks", records(20, 2))
    df = headwater_batch(spark, broker.bootstrap, assign=json.dumps({"clicks": [1]}), startingTimestamp=T0 + 11_000)
    # partition 1 holds the odd records; from timestamp T0+11s on: 11, 13, ..., 19
    assert sorted(bytes(r.value) for r in df.collect()) == sorted(f"v{i}".encode() for i in range(11, 20, 2))


def test_bad_options_get_a_clear_error(spark, broker, tmp_path):
    with pytest.raises(Exception, match="exactly one of the options 'subscribe', 'subscribePattern', 'assign'"):
        spark.read.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap).load().collect()
    with pytest.raises(Exception, match="'kafka.bootstrap.servers' is required"):
        spark.read.format("headwater").option("subscribe", "x").load().collect()
    with pytest.raises(Exception, match="'maxOffsetsPerTrigger' must be a positive integer"):
        run_to_end(headwater_stream(spark, broker.bootstrap, subscribe="x", maxOffsetsPerTrigger="lots"), tmp_path)
    with pytest.raises(Exception, match="'kafka.auto.offset.reset' is not supported"):  # it would bypass failOnDataLoss
        headwater_batch(spark, broker.bootstrap, subscribe="x", **{"kafka.auto.offset.reset": "latest"}).collect()


def test_stream_honours_max_offsets_per_trigger_with_available_now(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "events", 3)
    sent = records(50, 3)
    produce(broker.bootstrap, "events", sent)
    stream = headwater_stream(spark, broker.bootstrap, subscribe="events", startingOffsets="earliest",
                              maxOffsetsPerTrigger=8)
    rows, query = run_to_end(stream.selectExpr("partition", "offset", "value"), tmp_path / "ck", parquet=tmp_path / "out")

    sizes = [p.numInputRows for p in query.recentProgress if p.numInputRows]
    assert sizes == [8] * 6 + [2]
    assert sorted(bytes(r.value) for r in rows) == sorted(v for _, v, *_ in sent)
    assert len({(r.partition, r.offset) for r in rows}) == 50
    last = json.loads(query.recentProgress[-1].sources[0].endOffset)
    assert last == {"events": {"0": 17, "1": 17, "2": 16}}

    # More records later: the same checkpoint goes on from where it stopped.
    produce(broker.bootstrap, "events", [(None, b"late", 1, None, None)])
    rows, query = run_to_end(stream.selectExpr("partition", "offset", "value"), tmp_path / "ck", parquet=tmp_path / "out")
    assert sum(p.numInputRows for p in query.recentProgress) == 1
    assert len(rows) == 51 and (1, 17, b"late") in [(r.partition, r.offset, bytes(r.value)) for r in rows]


def test_new_partitions_are_picked_up(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "metrics-a", 1)
    produce(broker.bootstrap, "metrics-a", [(None, b"a0", 0, None, None)])
    stream = headwater_stream(spark, broker.bootstrap, subscribePattern="metrics-.*", startingOffsets="earliest")
    out = tmp_path / "out"
    rows, _ = run_to_end(stream.select("topic", "value"), tmp_path / "ck", parquet=out)
    assert [(r.topic, bytes(r.value)) for r in rows] == [("metrics-a", b"a0")]

    # A topic that matches the pattern appears: its partitions are read from offset 0.
    create_topic(broker.bootstrap, "metrics-b", 2)
    produce(broker.bootstrap, "metrics-b", [(None, b"b0", 0, None, None), (None, b"b1", 1, None, None)])
    produce(broker.bootstrap, "metrics-a", [(None, b"a1", 0, None, None)])
    rows, _ = run_to_end(stream.select("topic", "value"), tmp_path / "ck", parquet=out)
    assert sorted((r.topic, bytes(r.value)) for r in rows) == [("metrics-a", b"a0"), ("metrics-a", b"a1"),
                                                               ("metrics-b", b"b0"), ("metrics-b", b"b1")]


def test_records_lost_to_retention_fail_the_query_or_are_skipped(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "audit", 1)
    produce(broker.bootstrap, "audit", [(None, f"r{i}".encode(), 0, None, None) for i in range(3)])
    stream = headwater_stream(spark, broker.bootstrap, subscribe="audit", startingOffsets="earliest")
    out = tmp_path / "out"
    run_to_end(stream.select("value"), tmp_path / "ck", parquet=out)  # the query is now at offset 3
    produce(broker.bootstrap, "audit", [(None, f"r{i}".encode(), 0, None, None) for i in range(3, 10)])
    # Records 0..5 fall off the log before the query runs again.
    broker.stop()
    logs = LogManager(broker.data_dir)
    logs.get_log("audit", 0).delete_records_before(6)
    logs.close()
    broker.start()

    with pytest.raises(Exception, match=r"audit-0: offsets 3\.\.5 are no longer in the log \(log start offset is 6\)"):
        run_to_end(stream.select("value"), tmp_path / "ck", parquet=out)
    tolerant = headwater_stream(spark, broker.bootstrap, subscribe="audit", startingOffsets="earliest",
                                failOnDataLoss="false")
    rows, _ = run_to_end(tolerant.select("value"), tmp_path / "ck", parquet=out)
    assert sorted(bytes(r.value) for r in rows) == [b"r0", b"r1", b"r2", b"r6", b"r7", b"r8", b"r9"]


def test_topic_recreated_behind_the_checkpoint_is_data_loss(spark, broker, tmp_path):
    from confluent_kafka.admin import AdminClient

    create_topic(broker.bootstrap, "ledger", 1)
    produce(broker.bootstrap, "ledger", [(None, f"a{i}".encode(), 0, None, None) for i in range(5)])
    stream = headwater_stream(spark, broker.bootstrap, subscribe="ledger", startingOffsets="earliest")
    out = tmp_path / "out"
    run_to_end(stream.select("value"), tmp_path / "ck", parquet=out)  # at offset 5
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics(["ledger"])["ledger"].result(30)
    create_topic(broker.bootstrap, "ledger", 1)
    produce(broker.bootstrap, "ledger", [(None, f"b{i}".encode(), 0, None, None) for i in range(3)])

    with pytest.raises(Exception, match="ledger-0: the log end offset went back from 5 to 3"):
        run_to_end(stream.select("value"), tmp_path / "ck", parquet=out)
    tolerant = headwater_stream(spark, broker.bootstrap, subscribe="ledger", startingOffsets="earliest",
                                failOnDataLoss="false")
    run_to_end(tolerant.select("value"), tmp_path / "ck", parquet=out)  # goes on from offset 3
    produce(broker.bootstrap, "ledger", [(None, b"b3", 0, None, None)])
    rows, _ = run_to_end(tolerant.select("value"), tmp_path / "ck", parquet=out)
    assert sorted(bytes(r.value) for r in rows) == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b3"]


def test_sink_round_trip(spark, broker, tmp_path):
    create_topic(broker.bootstrap, "source", 2)
    create_topic(broker.bootstrap, "copy", 2)
    sent = records(20, 2)
    produce(broker.bootstrap, "source", sent)
    stream = headwater_stream(spark, broker.bootstrap, subscribe="source", startingOffsets="earliest",
                              includeHeaders="true")
    query = (stream.selectExpr("key", "upper(cast(value as string)) as value", "partition", "headers")
             .writeStream.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("topic", "copy").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    query.awaitTermination()

    back = headwater_batch(spark, broker.bootstrap, subscribe="copy", includeHeaders="true").collect()
    got = sorted((r.partition, bytes(r.key), bytes(r.value), [(h.key, h.value and bytes(h.value)) for h in r.headers]
                  if r.headers else None) for r in back)
    assert got == sorted((p, k, v.upper(), h) for k, v, p, h, _ in sent)

    # The batch writer, with the topic taken from a column.
    spark.createDataFrame([("copy", "x"), ("other", "y")], "topic string, value string") \
        .write.format("headwater").option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    assert [bytes(r.value) for r in headwater_batch(spark, broker.bootstrap, subscribe="other").collect()] == [b"y"]
    with pytest.raises(Exception, match="required attribute 'value' not found"):
        spark.createDataFrame([("k",)], "key string").write.format("headwater") \
            .option("kafka.bootstrap.servers", broker.bootstrap).option("topic", "copy").mode("append").save()


def test_compressed_batches_of_every_codec(spark, broker):
    sent, fetcher = {}, Fetcher({"bootstrap.servers": broker.bootstrap})
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        create_topic(broker.bootstrap, f"packed-{codec}", 2)
        sent[f"packed-{codec}"] = records(60, 2)
        produce(broker.bootstrap, f"packed-{codec}", sent[f"packed-{codec}"], **{"compression.type": codec,
                                                                                 "linger.ms": 50})
        stored = fetcher.fetch(f"packed-{codec}", 0, 0).records
        assert read_header(stored).compression == Compression[codec.upper()]  # as stored, not sent plain
    fetcher.close()
    rows = headwater_batch(spark, broker.bootstrap, subscribePattern="packed-.*", includeHeaders="true").collect()
    got = sorted((r.topic, r.partition, bytes(r.key), bytes(r.value), r.timestamp.timestamp() * 1000,
                  [(h.key, h.value and bytes(h.value)) for h in r.headers] if r.headers else None) for r in rows)
    assert got == sorted((t, p, k, v, ts, h) for t, rs in sent.items() for k, v, p, h, ts in rs)
    for topic in sent:
        for partition in (0, 1):
            offsets = sorted(r.offset for r in rows if (r.topic, r.partition) == (topic, partition))
            assert offsets == list(range(30))


def test_read_committed_leaves_out_aborted_transactions(spark, broker):
    create_topic(broker.bootstrap, "payments", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "payments-tx"})
    producer.init_transactions(30)

    def transaction(values: list[bytes], commit: bool) -> None:
        producer.begin_transaction()
        for value in values:
            producer.produce("payments", value)
        producer.flush(30)  # written, so that an abort has records to mark (librdkafka drops unsent ones)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)

    transaction([b"c0", b"c1"], commit=True)
    transaction([b"a0", b"a1", b"a2"], commit=False)
    produce(broker.bootstrap, "payments", [(None, b"p0", 0, None, None)])  # outside any transaction
    transaction([b"c2"], commit=True)
    transaction([b"a3"], commit=False)

    def values(**options) -> list[bytes]:
        rows = headwater_batch(spark, broker.bootstrap, subscribe="payments", **options).collect()
        return [bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)]

    committed = [b"c0", b"c1", b"p0", b"c2"]
    assert values(**{"kafka.isolation.level": "read_committed"}) == committed
    assert values() == committed  # librdkafka's default, which the planner uses too
    assert values(**{"kafka.isolation.level": "read_uncommitted"}) == [b"c0", b"c1", b"a0", b"a1", b"a2", b"p0",
                                                                       b"c2", b"a3"]
