"""Chapter: schemas that evolve. The broker's own schema registry (its HTTP listener's root)
takes an order schema, refuses a change old records could not be read with (a field without a
default), takes the compatible one, and confluent-kafka's Avro serializer and deserializer
write and read orders with it, checked against the records as written in plain Python."""
from __future__ import annotations

import json

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from headwater.demo.checks import CheckFailed

TOPIC = "priced-orders"
ORDER = {"type": "record", "name": "Order", "namespace": "demo", "fields": [
    {"name": "id", "type": "string"}, {"name": "cents", "type": "long"}]}
NO_DEFAULT = {**ORDER, "fields": ORDER["fields"] + [{"name": "currency", "type": "string"}]}
EVOLVED = {**ORDER, "fields": ORDER["fields"] + [{"name": "currency", "type": "string", "default": "EUR"}]}


def _read(bootstrap: str, count: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-schemas"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values: list[bytes] = []
    while len(values) < count:
        values += [m.value() for m in consumer.consume(count - len(values), 10) if not m.error()]
    consumer.close()
    return values


def run(bootstrap: str, console, registry_url: str) -> None:
    console.rule("[bold]Schemas that evolve: the built-in schema registry")
    registry = SchemaRegistryClient({"url": registry_url})
    subject = f"{TOPIC}-value"
    first = registry.register_schema(subject, Schema(json.dumps(ORDER), "AVRO"))
    console.print(f"{subject} v1 (id, cents) registered at {registry_url}: id {first}")
    try:
        registry.register_schema(subject, Schema(json.dumps(NO_DEFAULT), "AVRO"))
        raise CheckFailed("the registry took a field without a default under BACKWARD")
    except SchemaRegistryError as refused:
        console.print(f"+ currency without a default: [red]refused[/] ({refused.http_status_code}): "
                      f"{refused.error_message.split('details: ')[-1][:70]}")
    evolved = registry.register_schema(subject, Schema(json.dumps(EVOLVED), "AVRO"))
    console.print(f"+ currency with default \"EUR\": [green]registered[/] as v2, id {evolved}")

    context = SerializationContext(TOPIC, MessageField.VALUE)
    old = [{"id": f"o{i}", "cents": 100 * i + 5} for i in range(3)]
    new = [{"id": f"n{i}", "cents": 70 * i + 1, "currency": "CHF"} for i in range(3)]
    producer = Producer({"bootstrap.servers": bootstrap})
    for schema, orders in ((ORDER, old), (EVOLVED, new)):
        serialize = AvroSerializer(registry, json.dumps(schema), conf={"auto.register.schemas": False})
        for order in orders:
            producer.produce(TOPIC, serialize(order, context), partition=0)
    producer.flush(30)
    reader = AvroDeserializer(registry, json.dumps(EVOLVED))   # the v2 reader reads v1 records too
    read = [reader(value, context) for value in _read(bootstrap, len(old) + len(new))]
    expected = [{**o, "currency": "EUR"} for o in old] + new
    console.print(f"{len(old)} orders written with v1, {len(new)} with v2; read with v2, "
                  f"v1's orders get currency EUR: {read == expected}")
    if read != expected:
        raise CheckFailed(f"the orders read back differ: {read} != {expected}")
