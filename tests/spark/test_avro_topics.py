"""An Avro topic in a pipeline: records written by confluent-kafka's AvroSerializer against
the broker's own schema registry, read by Spark's Kafka connector and decoded by spark-avro's
from_avro with the subject's schema from the registry, equal to the records in plain Python;
a record of another schema version stops the query instead of decoding wrongly."""
from __future__ import annotations

import json

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from tests.support.sparkdata import create_topic

from headwater.spark.avro import avro_values
from headwater.testing import BrokerProcess

pytestmark = pytest.mark.xdist_group("spark")
ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"}, {"name": "cents", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None}]}
ORDERS = [{"id": f"o{i}", "cents": 250 * i - 3, "note": None if i % 2 else f"gift {i}"} for i in range(6)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("avro-topics") / "data", "--http-listener", "127.0.0.1:0") as proc:
        yield proc


def produce(broker, topic: str, schema: dict, records: list[dict]) -> None:
    serialize = AvroSerializer(SchemaRegistryClient({"url": broker.console_url}), json.dumps(schema))
    context = SerializationContext(topic, MessageField.VALUE)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for record in records:
        producer.produce(topic, serialize(record, context))
    assert producer.flush(30) == 0


def test_from_avro_with_the_registrys_schema(spark, kafka_connector, broker):
    create_topic(broker.bootstrap, "avro-orders", 1)
    produce(broker, "avro-orders", ORDER, ORDERS)
    raw = spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap) \
        .option("subscribe", "avro-orders").load()
    decoded = avro_values(raw, broker.console_url, "avro-orders-value").select("offset", "value.*")
    assert [row.asDict() for row in decoded.orderBy("offset").drop("offset").collect()] == ORDERS

    wider = {**ORDER, "fields": ORDER["fields"] + [{"name": "currency", "type": "string", "default": "EUR"}]}
    produce(broker, "avro-orders", wider, [{**ORDERS[0], "currency": "CHF"}])
    with pytest.raises(Exception, match="not Confluent Avro of schema id"):
        avro_values(raw, broker.console_url, "avro-orders-value", version=1).collect()
