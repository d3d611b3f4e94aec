"""The client side of the registry: records of one Avro schema in Confluent's wire format (magic
byte 0, the schema's id, the Avro body), the schema registered under the topic's subject
(TopicNameStrategy: ``<topic>-value`` or ``<topic>-key``) by the first encode. confluent-kafka's
AvroSerializer (fastavro) does the work, so what confluent-kafka's AvroDeserializer, Spark's
from_avro or a Java consumer read is what its own producer would write. The relay's and CDC's
``--schema-registry`` write through it."""
from __future__ import annotations

import json
from typing import Any

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext


def registry_client(url: str, registry_config: dict[str, str] | None = None) -> SchemaRegistryClient:
    """``registry_config``: more of the client's properties (basic.auth.user.info, ssl.ca.location);
    a login in the URL (``http://user:password@host:port``) works too, as in confluent-kafka."""
    return SchemaRegistryClient({"url": url, **(registry_config or {})})


class AvroRecords:
    """Encode and decode records of `schema` (a parsed Avro schema) for `topic`'s key or value."""

    def __init__(self, client: SchemaRegistryClient, topic: str, schema: dict, field: str = MessageField.VALUE):
        self.context = SerializationContext(topic, field)
        self.subject = f"{topic}-{field}"
        self._serialize = AvroSerializer(client, json.dumps(schema))
        self._deserialize = AvroDeserializer(client)

    def encode(self, record: dict[str, Any]) -> bytes:
        return self._serialize(record, self.context)

    def decode(self, value: bytes) -> dict[str, Any]:
        return self._deserialize(value, self.context)
