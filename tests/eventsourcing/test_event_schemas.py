"""Upcasters checked against the schema registry's verdict: the event classes' Avro schemas
registered as versions of `events.<Type>` in a real broker's registry; a compatible change
gets its upcaster, an incompatible one (BACKWARD: a field added without a default) is refused
when the upcaster is registered, with the registry's reason, and nothing is registered."""
import dataclasses
import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from headwater.eventsourcing.aggregate import DomainEvent
from headwater.eventsourcing.event_schemas import EventSchemas, IncompatibleEventSchema, avro_schema
from headwater.eventsourcing.upcasting import Upcasters
from headwater.testing import BrokerProcess


@dataclasses.dataclass(frozen=True)
class CartOpenedV1(DomainEvent):
    cart: str


@dataclasses.dataclass(frozen=True)
class CartOpened(DomainEvent):
    schema_version = 2
    cart: str
    currency: str = "EUR"
    note: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class ItemAddedV1(DomainEvent):
    sku: str
    quantity: int


@dataclasses.dataclass(frozen=True)
class ItemAdded(DomainEvent):
    schema_version = 2
    sku: str
    quantity: int
    unit_cents: int


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("event-schemas") / "data", "--http-listener", "127.0.0.1:0") as proc:
        yield SchemaRegistryClient({"url": proc.console_url})


def test_an_event_class_as_avro():
    assert avro_schema(CartOpened) == {
        "type": "record", "name": "CartOpened", "namespace": "headwater.events", "fields": [
            {"name": "cart", "type": "string"},
            {"name": "currency", "type": "string", "default": "EUR"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}


def test_upcasters_follow_the_registrys_verdict(registry):
    schemas, upcasters = EventSchemas(registry), Upcasters()

    @schemas.upcaster(upcasters, CartOpenedV1, CartOpened)
    def with_currency(body):
        return {**body, "currency": "EUR"}

    assert upcasters.upcast("CartOpened", 1, {"cart": "c1"}) == (2, {"cart": "c1", "currency": "EUR"})
    subject = registry.get_latest_version("events.CartOpened")
    assert subject.version == 2 and json.loads(subject.schema.schema_str) == avro_schema(CartOpened)

    with pytest.raises(IncompatibleEventSchema) as refused:
        schemas.upcaster(upcasters, ItemAddedV1, ItemAdded)
    assert "ItemAdded v2" in str(refused.value) and "unit_cents" in str(refused.value)
    assert upcasters.current_version("ItemAdded") is None                  # no upcaster registered
    assert registry.get_versions("events.ItemAdded") == [1]

    again = Upcasters()                                                     # the next start: nothing new
    schemas.upcaster(again, CartOpenedV1, CartOpened)(with_currency)
    assert registry.get_versions("events.CartOpened") == [1, 2]
