"""Reading the events topic back with confluent-kafka, for the relay tests."""
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition


def topic_end(bootstrap, topic):
    """How many records the topic holds (sum of high watermarks), 0 if it does not exist yet."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-watermarks"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions or {}
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions)
    finally:
        consumer.close()


def read_topic(bootstrap, topic):
    """Every record of every partition: [(partition, key, value)] in offset order per partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "test-reader", "enable.partition.eof": True})
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
