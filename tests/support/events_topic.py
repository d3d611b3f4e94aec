"""Reading the events topic back with confluent-kafka, and what it must hold, for the relay tests."""
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from headwater.demo.shopping_cart import AddedThenRemoved, CurrentCarts, current_carts, removals
from headwater.eventsourcing import open_store
from headwater.eventsourcing.projection import ProjectionRunner
from headwater.eventsourcing.row_formats import JsonRows, RowFormat, decode_value
from headwater.eventsourcing.subscription import TopicSource


def topic_end(bootstrap, topic):
    """How many records the topic holds (sum of high watermarks), 0 if it does not exist yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-watermarks"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions or {}
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def read_topic(bootstrap, topic, security=None):
    """Every record of every partition: [(partition, key, value)] in offset order per partition
    (`security`: a secured broker's client properties)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **(security or {}), "group.id": "test-reader",
                         "enable.partition.eof": True})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records, at_end = [], set()
        while len(at_end) < len(partitions):
            message = consumer.poll(10)
            assert message is not None, "the topic did not reach its end"
            if message.error():
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                at_end.add(message.partition())
                continue
            records.append((message.partition(), message.key().decode(), message.value()))
        return records
    finally:
        consumer.close()


def assert_topic_holds_the_store(bootstrap, topic, store):
    """Every stored event exactly once, each stream in one partition and in version order."""
    records = read_topic(bootstrap, topic)
    stored = store.read_all(0, 10 ** 6)
    assert len(records) == len(stored) == store.head_position()
    rows = [decode_value(value) for _, _, value in records]
    assert sorted(row[3] for row in rows) == sorted(e.event_id for e in stored)  # each event exactly once
    by_stream = {}
    for (partition, key, _), row in zip(records, rows):
        assert key == row[1]
        by_stream.setdefault(key, []).append((partition, row[2]))
    for stream, entries in by_stream.items():
        assert len({p for p, _ in entries}) == 1  # one partition per stream
        assert [v for _, v in entries] == list(range(1, store.stream_version(stream) + 1))  # in order


def assert_projections_from_topic_equal_store(bootstrap, topic, store, views_path, rows: RowFormat = JsonRows()):
    """The shop's projections fed from the topic (into a store at `views_path`) equal them fed from the store."""
    topic_views = open_store(str(views_path))
    for projection in (CurrentCarts(), AddedThenRemoved()):
        ProjectionRunner(store, projection).catch_up()
        source = TopicSource(topic_views, bootstrap, topic, rows=rows)
        ProjectionRunner(topic_views, projection, source).catch_up()
        source.close()
    assert current_carts(topic_views) == current_carts(store)
    assert removals(topic_views) == removals(store)
    topic_views.close()
