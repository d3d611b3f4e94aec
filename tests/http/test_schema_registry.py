"""The schema registry over the wire: confluent-kafka's own serializers and deserializers for
Avro, Protobuf and JSON Schema against a real broker whose HTTP listener is their
``schema.registry.url``, with references and auto.register.schemas=false; bad input refused
with Confluent's error codes and nothing stored; the delete rules; a restart that keeps every
schema and id."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from headwater.cli.main import main
from headwater.testing import BrokerProcess

from tests.support.clients import confluent_consume, confluent_produce

MONEY = {"type": "record", "name": "Money", "namespace": "shop",
         "fields": [{"name": "currency", "type": "string"}, {"name": "cents", "type": "long"}]}
ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "string"}, {"name": "total", "type": "shop.Money"}]}
ORDERS = [{"id": f"o{i}", "total": {"currency": "EUR", "cents": 100 * i + 7}} for i in range(5)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("registry") / "data", "--http-listener", "127.0.0.1:0") as proc:
        yield proc


@pytest.fixture
def client(broker):
    return SchemaRegistryClient({"url": broker.console_url})


def round_trip(broker, topic: str, serialize, deserialize, values: list) -> list:
    """Values serialized, produced, consumed and deserialized, as an application does it."""
    context = SerializationContext(topic, MessageField.VALUE)
    confluent_produce(broker.bootstrap, topic, [(None, serialize(v, context), []) for v in values])
    return [deserialize(value, context) for *_, value, _ in confluent_consume(broker.bootstrap, topic, [0], len(values))]


def schemas_end(broker) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "unused"})
    try:
        return consumer.get_watermark_offsets(TopicPartition("_schemas", 0), timeout=10)[1]
    finally:
        consumer.close()


def post(url: str, body) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=body if isinstance(body, bytes) else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        assert error.headers["Content-Type"] == "application/vnd.schemaregistry.v1+json"
        return error.code, json.loads(error.read())


def test_avro_with_a_reference_and_without_auto_registration(broker, client):
    money = client.register_schema("shop.Money", Schema(json.dumps(MONEY), "AVRO"))
    order = Schema(json.dumps(ORDER), "AVRO", [SchemaReference("shop.Money", "shop.Money", 1)])
    order_id = client.register_schema("avro-orders-value", order)
    serializer = AvroSerializer(client, order, conf={"auto.register.schemas": False})
    assert round_trip(broker, "avro-orders", serializer, AvroDeserializer(client), ORDERS) == ORDERS
    assert client.get_referenced_by("shop.Money", 1) == [order_id] and money != order_id
    registered = client.get_latest_version("avro-orders-value")
    assert (registered.schema_id, registered.version, registered.schema.references[0].subject) == \
        (order_id, 1, "shop.Money")


MONEY_PROTO = 'syntax = "proto3";\npackage shop;\nmessage Money { string currency = 1; int64 cents = 2; }\n'
ORDER_PROTO = ('syntax = "proto3";\npackage shop;\nimport "shop/money.proto";\n'
               "message Order { string id = 1; Money total = 2; }\n")


def order_class() -> type:
    """shop.Order of ORDER_PROTO, built from descriptors (not from the text)."""
    money = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
    message = money.message_type.add(name="Money")
    message.field.add(name="currency", number=1, type=9, label=1)
    message.field.add(name="cents", number=2, type=3, label=1)
    order = descriptor_pb2.FileDescriptorProto(name="shop/order.proto", package="shop", syntax="proto3",
                                               dependency=["shop/money.proto"])
    message = order.message_type.add(name="Order")
    message.field.add(name="id", number=1, type=9, label=1)
    message.field.add(name="total", number=2, type=11, label=1, type_name=".shop.Money")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order"))


def test_protobuf_registers_its_imports_as_references(broker, client):
    Order = order_class()
    orders = [Order(id=o["id"], total=o["total"]) for o in ORDERS]
    serializer = ProtobufSerializer(Order, client)
    got = round_trip(broker, "proto-orders", serializer, ProtobufDeserializer(Order), orders)
    assert got == orders
    latest = client.get_latest_version("proto-orders-value")
    assert [(r.name, r.subject) for r in latest.schema.references] == [("shop/money.proto", "shop/money.proto")]
    assert client.get_versions("shop/money.proto") == [1]         # a subject with "/" in its name


def test_proto_text_is_served_serialized_to_protobuf_clients(broker, client):
    """Registered as .proto text (as the CLI or a Java client does), read back by confluent-kafka's
    Protobuf clients, which ask for ?format=serialized."""
    client.register_schema("text-money", Schema(MONEY_PROTO, "PROTOBUF"))
    order_id = client.register_schema("text-orders-value", Schema(ORDER_PROTO, "PROTOBUF", [
        SchemaReference("shop/money.proto", "text-money", 1)]))
    with urllib.request.urlopen(f"{broker.console_url}schemas/ids/{order_id}", timeout=30) as answer:
        assert json.loads(answer.read())["schema"] == ORDER_PROTO        # as registered, unless asked
    Order = order_class()
    orders = [Order(id=o["id"], total=o["total"]) for o in ORDERS]
    application = SchemaRegistryClient({"url": broker.console_url})   # not the registering client's cache
    serializer = ProtobufSerializer(Order, application, {"auto.register.schemas": False, "use.latest.version": True})
    got = round_trip(broker, "text-orders", serializer, ProtobufDeserializer(Order, {}, application), orders)
    assert [(o.id, o.total.currency, o.total.cents) for o in got] == \
        [(o["id"], o["total"]["currency"], o["total"]["cents"]) for o in ORDERS]
    assert client.get_versions("text-orders-value") == [1]


def test_json_schema_auto_registered_then_looked_up(broker, client):
    schema = json.dumps({"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}},
                         "required": ["id"]})
    rows = [{"id": f"r{i}", "n": i} for i in range(4)]
    write = JSONSerializer(schema, client)
    context = SerializationContext("json-rows", MessageField.VALUE)
    first = write(rows[0], context)
    looked_up = JSONSerializer(schema, client, conf={"auto.register.schemas": False})
    assert round_trip(broker, "json-rows", looked_up, JSONDeserializer(schema, schema_registry_client=client),
                      rows) == rows
    assert first[1:5] == looked_up(rows[0], context)[1:5]             # the one id, registered once
    assert client.get_versions("json-rows-value") == [1]


def test_bad_input_gets_the_documented_error_and_nothing_is_stored(broker, client):
    client.register_schema("bad-value", Schema('"string"', "AVRO"))
    end = schemas_end(broker)
    url = broker.console_url + "subjects/bad-value/versions"
    cases = {"unparsable": {"schema": '{"type": "record", "name":'},
             "reference to nothing": {"schema": json.dumps(ORDER), "references": [
                 {"name": "shop.Money", "subject": "no-such-subject", "version": 1}]},
             "10 MB": {"schema": json.dumps({"type": "record", "name": "Big", "doc": "x" * (10 << 20), "fields": []})},
             "unknown type": {"schema": "{}", "schemaType": "XML"}}
    for case, body in cases.items():
        status, error = post(url, body)
        assert (status, error["error_code"]) == (422, 42201), (case, error)
    status, error = post(broker.console_url + "subjects/bad-value/versions", b"not json")
    assert (status, error["error_code"]) == (400, 400)
    with pytest.raises(SchemaRegistryError) as caught:
        client.set_compatibility("bad-value", "SIDEWAYS")
    assert caught.value.error_code == 42203
    with pytest.raises(SchemaRegistryError) as caught:
        client.get_version("bad-value", 0)
    assert caught.value.error_code == 42202
    assert schemas_end(broker) == end
    assert client.get_versions("bad-value") == [1]
    assert client.get_compatibility() == "BACKWARD"                     # and the broker serves on


def test_soft_and_hard_delete_rules(broker, client):
    def code(call, *args, **kwargs) -> int:
        with pytest.raises(SchemaRegistryError) as caught:
            call(*args, **kwargs)
        return caught.value.error_code

    first = client.register_schema("gone-value", Schema('"float"', "AVRO"))   # no other subject has it
    client.register_schema("gone-value", Schema('"double"', "AVRO"))
    assert code(client.delete_version, "gone-value", 1, permanent=True) == 40407
    assert client.delete_version("gone-value", 1) == 1
    assert code(client.delete_version, "gone-value", 1) == 40406
    assert code(client.get_version, "gone-value", 1) == 40402
    assert client.get_schema(first).schema_str == '"float"'              # still decodes old records
    assert code(client.delete_subject, "gone-value", permanent=True) == 40405
    assert client.delete_subject("gone-value") == [2]
    assert code(client.delete_subject, "gone-value") == 40404
    assert "gone-value" not in client.get_subjects() and "gone-value" in client.get_subjects(deleted=True)
    assert client.delete_subject("gone-value", permanent=True) == [1, 2]
    assert code(client.get_versions, "gone-value") == 40401
    assert code(SchemaRegistryClient({"url": broker.console_url}).get_schema, first) == 40403


def test_compatibility_check_and_settings(broker, client):
    client.register_schema("checked-value", Schema(json.dumps(MONEY), "AVRO"))
    status, verdict = post(broker.console_url + "compatibility/subjects/checked-value/versions/latest?verbose=true",
                           {"schema": json.dumps(MONEY)})
    assert (status, verdict) == (200, {"is_compatible": True, "messages": []})
    assert post(broker.console_url + "compatibility/subjects/checked-value/versions/9", {"schema": '"int"'})[1][
        "error_code"] == 40402
    assert client.set_compatibility("checked-value", "full_transitive") == {"compatibility": "FULL_TRANSITIVE"}
    assert client.get_compatibility("checked-value") == "FULL_TRANSITIVE"
    assert client.update_mode("checked-value", "READONLY") == "READONLY"
    with pytest.raises(SchemaRegistryError) as caught:
        client.register_schema("checked-value", Schema('"int"', "AVRO"))
    assert caught.value.error_code == 42205
    assert client.delete_mode("checked-value") == "READONLY" and client.get_global_mode() == "READWRITE"
    assert sorted(client.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]


def test_an_incompatible_change_is_refused_and_checked(broker, client, tmp_path, capsys):
    """BACKWARD Avro: a field added without a default cannot be read from the old records."""
    money_id = client.register_schema("evolving-value", Schema(json.dumps(MONEY), "AVRO"))
    fields = MONEY["fields"]
    without_default = {**MONEY, "fields": fields + [{"name": "note", "type": "string"}]}
    with_default = {**MONEY, "fields": fields + [{"name": "note", "type": "string", "default": ""}]}
    end = schemas_end(broker)
    status, error = post(broker.console_url + "subjects/evolving-value/versions",
                         {"schema": json.dumps(without_default)})
    assert (status, error["error_code"]) == (409, 409) and "note" in error["message"], error
    assert schemas_end(broker) == end and client.get_versions("evolving-value") == [1]
    files = {"bad": tmp_path / "bad.avsc", "good": tmp_path / "good.avsc"}
    files["bad"].write_text(json.dumps(without_default))
    files["good"].write_text(json.dumps(with_default))
    exits = {name: main(["schemas", "check", "evolving-value", str(path), "--url", broker.console_url])
             for name, path in files.items()}
    out = capsys.readouterr().out
    assert exits == {"bad": 1, "good": 0} and "is not compatible with" in out and "note" in out
    assert client.register_schema("evolving-value", Schema(json.dumps(with_default), "AVRO")) != money_id
    assert client.get_versions("evolving-value") == [1, 2]


def test_console_pages_list_subjects_and_diff_versions(broker, client):
    client.register_schema("paged-value", Schema(json.dumps(MONEY), "AVRO"))
    wider = {**MONEY, "fields": MONEY["fields"] + [{"name": "note", "type": "string", "default": ""}]}
    client.register_schema("paged-value", Schema(json.dumps(wider), "AVRO"))
    with urllib.request.urlopen(broker.console_url + "registry", timeout=30) as page:
        assert 'href="/registry/shop%2Fmoney.proto"' in page.read().decode()
    with urllib.request.urlopen(broker.console_url + "registry/paged-value?from=1&to=2", timeout=30) as page:
        html = page.read().decode()
    changed = [line for line in html.split('<pre id="diff">')[1].split("</pre>")[0].splitlines()
               if line.startswith(("+ ", "- ", "+  ", "-  "))]
    assert any("note" in line for line in changed) and all(line.startswith("+") for line in changed)
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(broker.console_url + "registry/paged-value?to=7", timeout=30)
    assert missing.value.code == 404


def test_the_schemas_command(broker, tmp_path, capsys):
    def headwater(*args: str) -> tuple[int, str, str]:
        status = main(["schemas", *args, "--url", broker.console_url])
        out, err = capsys.readouterr()
        return status, out, err

    money = tmp_path / "money.avsc"
    money.write_text(json.dumps(MONEY))
    status, out, _ = headwater("register", "cli-money", str(money), "--json")
    registered, = json.loads(out)
    assert status == 0 and registered["version"] == 1
    assert registered["id"] == SchemaRegistryClient({"url": broker.console_url}).get_latest_version(
        "cli-money").schema_id
    order = tmp_path / "order.schema"
    order.write_text(json.dumps(ORDER))
    status, out, _ = headwater("register", "cli-order", str(order), "--type", "AVRO", "--reference",
                               "shop.Money=cli-money:latest")
    assert status == 0 and "version 1 of cli-order" in out
    status, out, _ = headwater("list", "--json")
    listed = {row["subject"]: row for row in json.loads(out)}
    assert listed["cli-money"] == {"subject": "cli-money", "versions": 1, "latest": 1, "id": registered["id"],
                                   "type": "AVRO"}
    status, out, _ = headwater("show", "cli-order", "--json")
    assert json.loads(out)["references"] == [{"name": "shop.Money", "subject": "cli-money", "version": 1}]
    status, out, _ = headwater("show", "cli-money")
    assert out.splitlines()[0].startswith("subject cli-money  version 1") and json.loads(
        out.split("\n", 1)[1]) == MONEY
    status, out, _ = headwater("check", "cli-money", str(money), "--json")
    assert (status, json.loads(out)) == (0, {"is_compatible": True, "messages": []})
    status, _, err = headwater("check", "cli-money", str(money), "--version", "9")
    assert status == 1 and err.strip() == "headwater: error: Version 9 not found for subject 'cli-money'. " \
                                          "(error 40402)"
    bad = tmp_path / "bad.avsc"
    bad.write_text("{nope")
    status, _, err = headwater("register", "cli-money", str(bad))
    assert status == 1 and "(error 42201)" in err
    assert main(["schemas", "list", "--url", "http://127.0.0.1:9"]) == 1
    assert "cannot reach the schema registry at http://127.0.0.1:9/" in capsys.readouterr().err


def test_a_restart_keeps_every_schema_and_id(broker):
    """Last: it restarts the module's broker."""
    def everything(client) -> dict:
        found = {}
        for subject in client.get_subjects(deleted=True):
            for number in client.get_versions(subject, deleted=True):
                version = client.get_version(subject, number, deleted=True)
                found[(subject, number)] = (version.schema_id, version.schema)
        return found

    before = everything(SchemaRegistryClient({"url": broker.console_url}))
    assert len(before) >= 5
    broker.stop()
    broker.start()
    after = SchemaRegistryClient({"url": broker.console_url})
    assert everything(after) == before
    assert after.get_compatibility("checked-value") == "FULL_TRANSITIVE"
    new_id = after.register_schema("after-restart-value", Schema('"bytes"', "AVRO"))
    assert new_id > max(schema_id for schema_id, _ in before.values())
