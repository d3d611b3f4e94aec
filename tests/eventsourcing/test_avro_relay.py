"""The relay with --schema-registry: the stored rows as Avro in Confluent's wire format, their
schema registered under <topic>-value in the broker's own registry; an independent
AvroDeserializer reads back exactly the stored rows, a restarted relay resumes after what the
topic holds, and projections fed by the topic equal those fed by the store."""
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.demo.shopping_cart import Shop
from headwater.eventsourcing import open_store
from headwater.eventsourcing.relay import OutboxRelay
from headwater.eventsourcing.row_formats import FIELDS, ROW_SCHEMA, row_format
from headwater.testing import BrokerProcess

from tests.support.events_topic import assert_projections_from_topic_equal_store, read_topic

TOPIC = "avro-carts"


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("avro-relay") / "data", "--http-listener", "127.0.0.1:0") as proc:
        yield proc


def relay(store, broker) -> OutboxRelay:
    return OutboxRelay(store, broker.bootstrap, TOPIC, partitions=2,
                       rows=row_format(TOPIC, broker.console_url))


def test_the_relay_writes_avro_with_its_schema_in_the_registry(broker, tmp_path):
    store = open_store(str(tmp_path / "events.db"))
    Shop(store, seed=3).day(carts=6, actions=80)
    first = relay(store, broker)
    while first.publish_once():
        pass
    Shop(store, seed=4, prefix="late").day(carts=2, actions=20)
    again = relay(store, broker)                      # resumes after what the topic holds, read as Avro
    assert again.published == first.published
    while again.publish_once():
        pass

    registry = SchemaRegistryClient({"url": broker.console_url})
    registered = registry.get_latest_version(f"{TOPIC}-value")
    assert json.loads(registered.schema.schema_str) == ROW_SCHEMA and registered.version == 1
    deserialize = AvroDeserializer(registry)
    context = SerializationContext(TOPIC, MessageField.VALUE)
    records = [deserialize(value, context) for _, _, value in read_topic(broker.bootstrap, TOPIC)]
    stored = {row[0]: dict(zip(FIELDS, row)) for row in store.read_all_rows(0, 10 ** 6)}
    assert sorted(records, key=lambda r: r["position"]) == [stored[p] for p in sorted(stored)]
    assert_projections_from_topic_equal_store(broker.bootstrap, TOPIC, store, tmp_path / "views.db",
                                              rows=row_format(TOPIC, broker.console_url))
    store.close()
