"""The schema registry's compatibility verdicts: a table of schema pairs per format, each with
the verdict Confluent's registry gives by its documentation (for Avro the specification's schema
resolution rules; for Protobuf the language guide's wire rules; for JSON Schema the open and
closed content models), plus transitive chains, NONE, canonical texts and invalid schemas."""

import base64
import json
from importlib.resources import files

import pytest
from google.protobuf import descriptor_pb2

from headwater.schemas.compatibility import InvalidSchema, incompatibilities, parse
from headwater.schemas.protobuf import serialized

B, F = "BACKWARD", "FORWARD"


def record(*fields, name="User"):
    return json.dumps({"type": "record", "name": name, "namespace": "shop", "fields": list(fields)})


def field(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def enum(*symbols, **extra):
    return {"type": "enum", "name": "Colour", "symbols": list(symbols), **extra}


ADDRESS = json.dumps({"type": "record", "name": "Address", "namespace": "shop",
                      "fields": [field("city", "string")]})
AVRO_REFERENCES = {"shop.Address": ADDRESS}

# (case, old, new, backward compatible, forward compatible)
AVRO = [
    ("add field with default", record(field("a", "int")), record(field("a", "int"), field("b", "string", default="")), True, True),
    ("add field without default", record(field("a", "int")), record(field("a", "int"), field("b", "string")), False, True),
    ("remove field with default", record(field("a", "int"), field("b", "int", default=0)), record(field("a", "int")), True, True),
    ("remove field without default", record(field("a", "int"), field("b", "int")), record(field("a", "int")), True, False),
    ("promote int to long", record(field("a", "int")), record(field("a", "long")), True, False),
    ("demote long to int", record(field("a", "long")), record(field("a", "int")), False, True),
    ("promote int to double", record(field("a", "int")), record(field("a", "double")), True, False),
    ("promote float to double", record(field("a", "float")), record(field("a", "double")), True, False),
    ("string to bytes", record(field("a", "string")), record(field("a", "bytes")), True, True),
    ("int to string", record(field("a", "int")), record(field("a", "string")), False, False),
    ("logical type date on its int", record(field("d", {"type": "int", "logicalType": "date"})), record(field("d", "int")), True, True),
    ("add enum symbol", record(field("c", enum("RED", "BLUE"))), record(field("c", enum("RED", "BLUE", "GREEN"))), True, False),
    ("remove enum symbol", record(field("c", enum("RED", "BLUE"))), record(field("c", enum("RED"))), False, True),
    ("add enum symbol, old enum has a default", record(field("c", enum("RED", "BLUE", default="RED"))),
     record(field("c", enum("RED", "BLUE", "GREEN", default="RED"))), True, True),
    ("make field optional", record(field("a", "int")), record(field("a", ["null", "int"], default=None)), True, False),
    ("add union branch", record(field("a", ["null", "int"])), record(field("a", ["null", "int", "string"])), True, False),
    ("union branch int to long", record(field("a", ["null", "int"])), record(field("a", ["null", "long"])), True, False),
    ("nested record gains field without default",
     record(field("home", record(field("city", "string"), name="Place") and json.loads(record(field("city", "string"), name="Place")))),
     record(field("home", json.loads(record(field("city", "string"), field("zip", "string"), name="Place")))), False, True),
    ("nested record gains field with default",
     record(field("home", json.loads(record(field("city", "string"), name="Place")))),
     record(field("home", json.loads(record(field("city", "string"), field("zip", "string", default=""), name="Place")))), True, True),
    ("rename field with alias", record(field("a", "int")), record(field("b", "int", aliases=["a"])), True, False),
    ("rename field without alias", record(field("a", "int")), record(field("b", "int")), False, False),
    ("rename record without alias", record(field("a", "int")), record(field("a", "int"), name="Customer"), False, False),
    ("rename record with alias", record(field("a", "int")),
     json.dumps({**json.loads(record(field("a", "int"), name="Customer")), "aliases": ["shop.User"]}), True, False),
    ("array items int to long", record(field("xs", {"type": "array", "items": "int"})),
     record(field("xs", {"type": "array", "items": "long"})), True, False),
    ("map values int to string", record(field("m", {"type": "map", "values": "int"})),
     record(field("m", {"type": "map", "values": "string"})), False, False),
    ("fixed size change", record(field("f", {"type": "fixed", "name": "Hash", "size": 16})),
     record(field("f", {"type": "fixed", "name": "Hash", "size": 32})), False, False),
    ("reference unchanged, field with default added", record(field("home", "shop.Address")),
     record(field("home", "shop.Address"), field("n", "int", default=1)), True, True),
    ("reference replaced by a string", record(field("home", "shop.Address")), record(field("home", "string")), False, False),
]

PROTO_REFERENCES = {
    "geo.proto": 'syntax = "proto3"; package geo; message Point { double lat = 1; double lon = 2; }',
}


def proto(body: str, syntax: str = "proto3") -> str:
    return f'syntax = "{syntax}";\npackage shop;\nimport "geo.proto";\n{body}\n'


PROTOBUF = [
    ("add field", proto("message User { string name = 1; }"), proto("message User { string name = 1; int64 age = 2; }"), True, True),
    ("remove field", proto("message User { string name = 1; int64 age = 2; }"), proto("message User { string name = 1; }"), True, True),
    ("rename field, same number", proto("message User { string name = 1; }"), proto("message User { string full_name = 1; }"), True, True),
    ("int32 to int64", proto("message User { int32 age = 1; }"), proto("message User { int64 age = 1; }"), True, True),
    ("uint64 to bool", proto("message User { uint64 flag = 1; }"), proto("message User { bool flag = 1; }"), True, True),
    ("sint32 to sint64", proto("message User { sint32 n = 1; }"), proto("message User { sint64 n = 1; }"), True, True),
    ("sint32 to int32", proto("message User { sint32 n = 1; }"), proto("message User { int32 n = 1; }"), False, False),
    ("string to bytes", proto("message User { string s = 1; }"), proto("message User { bytes s = 1; }"), True, True),
    ("int32 to string", proto("message User { int32 age = 1; }"), proto("message User { string age = 1; }"), False, False),
    ("fixed32 to sfixed32", proto("message User { fixed32 n = 1; }"), proto("message User { sfixed32 n = 1; }"), True, True),
    ("message field to another message", proto("message A {} message B {} message User { A x = 1; }"),
     proto("message A {} message B {} message User { B x = 1; }"), False, False),
    ("enum field to int32", proto("enum Kind { K0 = 0; } message User { Kind k = 1; }"),
     proto("enum Kind { K0 = 0; } message User { int32 k = 1; }"), False, False),
    ("add enum value", proto("enum Kind { K0 = 0; } message User { Kind k = 1; }"),
     proto("enum Kind { K0 = 0; K1 = 1; } message User { Kind k = 1; }"), True, True),
    ("add message type", proto("message User { string name = 1; }"),
     proto("message User { string name = 1; } message Order { int64 id = 1; }"), True, False),
    ("remove message type", proto("message User { string name = 1; } message Order { int64 id = 1; }"),
     proto("message User { string name = 1; }"), False, True),
    ("nested message gains field", proto("message User { message Home { string city = 1; } Home home = 1; }"),
     proto("message User { message Home { string city = 1; string zip = 2; } Home home = 1; }"), True, True),
    ("nested message field changes type", proto("message User { message Home { string city = 1; } Home home = 1; }"),
     proto("message User { message Home { int32 city = 1; } Home home = 1; }"), False, False),
    ("string becomes repeated", proto("message User { string tag = 1; }"), proto("message User { repeated string tag = 1; }"), True, True),
    ("int32 becomes repeated", proto("message User { int32 n = 1; }"), proto("message User { repeated int32 n = 1; }"), True, True),
    ("one field into a new oneof", proto("message User { string email = 1; }"),
     proto("message User { oneof contact { string email = 1; } }"), True, True),
    ("two fields into a new oneof", proto("message User { string email = 1; string phone = 2; }"),
     proto("message User { oneof contact { string email = 1; string phone = 2; } }"), False, True),
    ("field into an existing oneof", proto("message User { oneof contact { string email = 1; } string phone = 2; }"),
     proto("message User { oneof contact { string email = 1; string phone = 2; } }"), False, False),
    ("field leaves a oneof the reader keeps", proto("message User { oneof contact { string email = 1; string phone = 2; } }"),
     proto("message User { oneof contact { string email = 1; } string phone = 2; }"), False, False),
    ("field removed from a oneof", proto("message User { oneof contact { string email = 1; string phone = 2; } }"),
     proto("message User { oneof contact { string email = 1; } }"), False, True),
    ("oneof dissolved into plain fields", proto("message User { oneof contact { string email = 1; string phone = 2; } }"),
     proto("message User { string email = 1; string phone = 2; }"), True, False),
    ("package renamed", proto("message User { string name = 1; }"),
     proto("message User { string name = 1; }").replace("package shop;", "package store;"), False, False),
    ("proto3 optional field added", proto("message User { string name = 1; }"),
     proto("message User { string name = 1; optional int32 age = 2; }"), True, True),
    ("proto2 required field added", proto("message User { optional string name = 1; }", "proto2"),
     proto("message User { optional string name = 1; required int32 age = 2; }", "proto2"), False, False),
    ("proto2 optional field made required", proto("message User { optional string name = 1; }", "proto2"),
     proto("message User { required string name = 1; }", "proto2"), False, True),
    ("referenced type used by a new field", proto("message User { string name = 1; }"),
     proto("message User { string name = 1; geo.Point home = 2; }"), True, True),
    ("referenced type replaced", proto("message User { geo.Point home = 1; }"), proto("message User { string home = 1; }"), False, False),
]


def obj(properties: dict, closed: bool | None = None, **extra) -> str:
    schema = {"type": "object", "properties": properties, **extra}
    if closed is not None:
        schema["additionalProperties"] = not closed
    return json.dumps(schema)


S, I, N = {"type": "string"}, {"type": "integer"}, {"type": "number"}
JSON_REFERENCES = {"https://example.com/address.json": obj({"city": S})}
ADDRESS_REF = {"$ref": "https://example.com/address.json"}

JSON = [
    ("open model: add optional property", obj({"a": S}), obj({"a": S, "b": S}), False, True),
    ("closed model: add optional property", obj({"a": S}, closed=True), obj({"a": S, "b": S}, closed=True), True, False),
    ("open model: remove optional property", obj({"a": S, "b": S}), obj({"a": S}), True, False),
    ("closed model: remove optional property", obj({"a": S, "b": S}, closed=True), obj({"a": S}, closed=True), False, True),
    ("closed model: remove a property the writer forbade", obj({"a": S, "b": False}, closed=True), obj({"a": S}, closed=True), True, True),
    ("open model: add required property", obj({"a": S}), obj({"a": S, "b": S}, required=["b"]), False, True),
    ("closed model: add required property", obj({"a": S}, closed=True), obj({"a": S, "b": S}, closed=True, required=["b"]), False, False),
    ("make property required", obj({"a": S}), obj({"a": S}, required=["a"]), False, True),
    ("closed model: add required property with a default", obj({"a": S}, closed=True),
     obj({"a": S, "b": {"type": "string", "default": ""}}, closed=True, required=["b"]), True, False),
    ("open to closed", obj({"a": S}), obj({"a": S}, closed=True), False, True),
    ("closed to open", obj({"a": S}, closed=True), obj({"a": S}), True, False),
    ("partially open: new property with the rest's schema", obj({"a": S}, additionalProperties=N),
     obj({"a": S, "b": N}, additionalProperties=N), True, True),
    ("partially open: new property narrower than the rest's schema", obj({"a": S}, additionalProperties=N),
     obj({"a": S, "b": I}, additionalProperties=N), False, True),
    ("widen integer to number", obj({"a": I}), obj({"a": N}), True, False),
    ("narrow number to integer", obj({"a": N}), obj({"a": I}), False, True),
    ("make property nullable", obj({"a": S}), obj({"a": {"type": ["string", "null"]}}), True, False),
    ("string to integer", obj({"a": S}), obj({"a": I}), False, False),
    ("add enum value", obj({"c": {"enum": ["red", "blue"]}}), obj({"c": {"enum": ["red", "blue", "green"]}}), True, False),
    ("add enum to a free string", obj({"c": S}), obj({"c": {"type": "string", "enum": ["red"]}}), False, True),
    ("lower the maximum", obj({"n": {"type": "integer", "maximum": 100}}), obj({"n": {"type": "integer", "maximum": 10}}), False, True),
    ("raise the minimum from none", obj({"n": I}), obj({"n": {"type": "integer", "minimum": 0}}), False, True),
    ("raise maxLength", obj({"s": {"type": "string", "maxLength": 5}}), obj({"s": {"type": "string", "maxLength": 9}}), True, False),
    ("add a pattern", obj({"s": S}), obj({"s": {"type": "string", "pattern": "^a"}}), False, True),
    ("array items integer to number", obj({"xs": {"type": "array", "items": I}}), obj({"xs": {"type": "array", "items": N}}), True, False),
    ("add oneOf branch", obj({"v": {"oneOf": [S, I]}}), obj({"v": {"oneOf": [S, I, {"type": "boolean"}]}}), True, False),
    ("nested closed object gains property", obj({"o": json.loads(obj({"x": S}, closed=True))}),
     obj({"o": json.loads(obj({"x": S, "y": S}, closed=True))}), True, False),
    ("referenced schema unchanged", obj({"home": ADDRESS_REF}, closed=True), obj({"home": ADDRESS_REF, "n": I}, closed=True), True, False),
    ("reference replaced by a string", obj({"home": ADDRESS_REF}), obj({"home": S}), False, False),
    ("local definition widened", json.dumps({**json.loads(obj({"n": {"$ref": "#/definitions/n"}})), "definitions": {"n": I}}),
     json.dumps({**json.loads(obj({"n": {"$ref": "#/definitions/n"}})), "definitions": {"n": N}}), True, False),
]

REFERENCES = {"AVRO": AVRO_REFERENCES, "PROTOBUF": PROTO_REFERENCES, "JSON": JSON_REFERENCES}
TABLE = [("AVRO", *case) for case in AVRO] + [("PROTOBUF", *case) for case in PROTOBUF] + [("JSON", *case) for case in JSON]


@pytest.mark.parametrize("schema_type, case, old, new, backward, forward", TABLE, ids=[f"{t[0]}: {t[1]}" for t in TABLE])
def test_verdicts_match_the_documented_rules(schema_type, case, old, new, backward, forward):
    refs = REFERENCES[schema_type]
    verdicts = {level: not incompatibilities(schema_type, new, [old], level, refs) for level in (B, F, "FULL", "NONE")}
    assert verdicts == {B: backward, F: forward, "FULL": backward and forward, "NONE": True}


def test_messages_name_the_field_or_path():
    found = incompatibilities("AVRO", record(field("a", "int"), field("b", "string")), [record(field("a", "int"))], B, {})
    assert len(found) == 1 and "'b'" in found[0] and "no default" in found[0]
    found = incompatibilities("PROTOBUF", proto("message User { string age = 3; }"), [proto("message User { int32 age = 3; }")], B, PROTO_REFERENCES)
    assert len(found) == 1 and "User.age = 3" in found[0]
    found = incompatibilities("JSON", obj({"a": I}), [obj({"a": S})], F, {})
    assert len(found) == 1 and "#/properties/a" in found[0]


# Three versions whose latest step passes and whose first-to-last step fails: the registry
# passes every version for the _TRANSITIVE levels and only the latest for the others.
CHAINS = [
    ("AVRO", B, [record(field("a", "int")), record(), record(field("a", "string", default=""))]),
    ("AVRO", F, [record(field("a", "int")), record(field("a", "int", default=0)), record()]),
    ("AVRO", "FULL", [record(field("a", "int")), record(field("a", "int", default=0)), record()]),
    ("PROTOBUF", B, [proto("message U { int32 x = 1; }"), proto("message U {}"), proto("message U { string x = 1; }")]),
    ("PROTOBUF", F, [proto("message U { int32 x = 1; }"), proto("message U {}"), proto("message U { string x = 1; }")]),
    ("PROTOBUF", "FULL", [proto("message U { int32 x = 1; }"), proto("message U {}"), proto("message U { string x = 1; }")]),
    # JSON Schema's check is a subset test, itself transitive: the chain is one registered while the level was NONE.
    ("JSON", B, [obj({"a": S}), obj({"a": I}), obj({"a": N})]),
    ("JSON", F, [obj({"a": S}), obj({"a": N}), obj({"a": I})]),
    ("JSON", "FULL", [obj({"a": S}), obj({"a": I}), obj({"a": I}, title="v3")]),
]


@pytest.mark.parametrize("schema_type, level, versions", CHAINS, ids=[f"{c[0]} {c[1]}" for c in CHAINS])
def test_transitive_levels_check_every_version(schema_type, level, versions):
    *previous, new = versions
    refs = REFERENCES[schema_type]
    assert incompatibilities(schema_type, new, previous[-1:], level, refs) == []
    found = incompatibilities(schema_type, new, previous, f"{level}_TRANSITIVE", refs)
    assert found and all("previous schema 1 of 2" in message for message in found)


def test_canonical_text_ignores_layout_but_not_meaning():
    compact = record(field("a", "int", default=1))
    spaced = json.dumps(json.loads(compact), indent=4)
    assert parse("AVRO", compact, {}) == parse("AVRO", spaced, {})
    assert parse("AVRO", compact, {}) != parse("AVRO", record(field("a", "int", default=2)), {})
    commented = proto("// who\nmessage User {\n  string name = 1;  // the name\n}")
    assert parse("PROTOBUF", commented, PROTO_REFERENCES) == parse("PROTOBUF", proto("message User { string name = 1; }"), PROTO_REFERENCES)
    reordered = json.dumps({"properties": {"a": S}, "type": "object"})
    assert parse("JSON", reordered, {}) == parse("JSON", obj({"a": S}), {})


def test_references_are_resolved():
    parse("AVRO", record(field("home", "shop.Address")), AVRO_REFERENCES)
    parse("PROTOBUF", proto("message User { geo.Point home = 1; }"), PROTO_REFERENCES)
    parse("PROTOBUF", 'syntax = "proto3"; import "google/protobuf/timestamp.proto"; message E { google.protobuf.Timestamp at = 1; }', {})
    parse("JSON", obj({"home": ADDRESS_REF}), JSON_REFERENCES)
    # Avro references that use one another, given in any order
    country = json.dumps({"type": "record", "name": "shop.Country", "fields": [field("code", "string")]})
    city = json.dumps({"type": "record", "name": "shop.City", "fields": [field("country", "shop.Country")]})
    parse("AVRO", record(field("c", "shop.City")), {"shop.City": city, "shop.Country": country})


INVALID = [
    ("AVRO", "{not json", {}, "not JSON"),
    ("AVRO", json.dumps({"type": "record", "name": "R", "fields": [{"name": "a"}]}), {}, "missing 'type'"),
    ("AVRO", record(field("a", "int", default="x")), {}, "Default value"),
    ("AVRO", record(field("c", enum("A", "A"))), {}, "unique"),
    ("AVRO", record(field("home", "shop.Address")), {}, "shop.Address"),
    ("AVRO", record(field("a", ["null", "int", "int"])), {}, "repeats a type"),
    ("AVRO", record(field("a", ["null", ["int", "string"]])), {}, "holds a union"),
    ("AVRO", record(field("a", "int"), field("a", "string")), {}, "names a field twice"),
    ("AVRO", "[" * 100_000 + "]" * 100_000, {}, "nested too deeply"),
    ("AVRO", record(field("c", "shop.City")), {"shop.City": json.dumps({"type": "record", "name": "shop.City", "fields": [field("k", "shop.Nowhere")]})}, "shop.Nowhere"),
    ("PROTOBUF", 'syntax = "proto3"; message User { string name = 1 }', {}, "schema:1:"),
    ("PROTOBUF", proto("message User { geo.Point home = 1; }"), {}, "geo.proto"),
    ("PROTOBUF", 'syntax = "proto3"; message User { Nope x = 1; }', {}, '"Nope" is not defined'),
    ("PROTOBUF", 'syntax = "proto3"; import "../../etc/hostname"; message A {}', {}, "not allowed"),
    ("PROTOBUF", 'syntax = "proto3"; message A {}', {"../escape.proto": ""}, "not an import path"),
    ("PROTOBUF", 'syntax = "proto3"; message A {} // \ud800', {}, "not UTF-8"),
    ("JSON", "{not json", {}, "not JSON"),
    ("JSON", "123", {}, "neither an object nor a boolean"),
    ("JSON", '{"items":' * 3000 + "{}" + "}" * 3000, {}, "nested too deeply"),
    ("JSON", json.dumps({"type": "strin"}), {}, "Invalid schema"),
    ("JSON", obj({"home": ADDRESS_REF}), {}, "https://example.com/address.json"),
    ("JSON", obj({"n": {"$ref": "#/definitions/missing"}}), {}, "#/definitions/missing"),
    ("XML", "<schema/>", {}, "unknown schema type"),
]


@pytest.mark.parametrize("schema_type, schema, refs, says", INVALID, ids=[f"{c[0]}: {c[3]}" for c in INVALID])
def test_invalid_schemas_are_refused_with_a_reason(schema_type, schema, refs, says):
    with pytest.raises(InvalidSchema) as refused:
        parse(schema_type, schema, refs)
    assert says in str(refused.value)


def serialized_pb(module) -> str:
    """What confluent-kafka's ProtobufSerializer registers: its file's descriptor, in base64."""
    return base64.standard_b64encode(module.DESCRIPTOR.serialized_pb).decode("ascii")


def test_protobuf_schemas_sent_as_serialized_descriptors_are_the_same_schemas():
    from google.protobuf import api_pb2, source_context_pb2, timestamp_pb2, type_pb2

    well_known = files("grpc_tools") / "_proto" / "google" / "protobuf"
    text = (well_known / "timestamp.proto").read_text()
    assert parse("PROTOBUF", serialized_pb(timestamp_pb2), {}) == parse("PROTOBUF", text, {})
    # a serialized file whose imports are serialized references, or left to the well-known types
    refs = {"google/protobuf/source_context.proto": serialized_pb(source_context_pb2),
            "google/protobuf/type.proto": serialized_pb(type_pb2)}
    assert parse("PROTOBUF", serialized_pb(api_pb2), refs) == parse("PROTOBUF", serialized_pb(api_pb2), {})
    # .proto text importing a reference registered in serialized form
    user = proto("message User { geo.Point home = 1; }")
    geo = serialized(PROTO_REFERENCES["geo.proto"], {})
    assert parse("PROTOBUF", user, {"geo.proto": geo}) == parse("PROTOBUF", user, PROTO_REFERENCES)
    # and the serialized form of a text schema reads back as the same schema
    assert parse("PROTOBUF", serialized(user, PROTO_REFERENCES), PROTO_REFERENCES) == parse("PROTOBUF", user, PROTO_REFERENCES)
    old = serialized(proto("message User { int32 age = 1; }"), PROTO_REFERENCES)
    assert incompatibilities("PROTOBUF", proto("message User { string age = 1; }"), [old], B, PROTO_REFERENCES)


def test_serialized_protobuf_with_a_type_that_resolves_to_nothing_is_refused():
    broken = descriptor_pb2.FileDescriptorProto(name="x.proto", package="x", syntax="proto3")
    message = broken.message_type.add(name="M")
    message.field.add(name="f", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                      type_name=".nowhere.N", label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    text = base64.standard_b64encode(broken.SerializeToString()).decode("ascii")
    with pytest.raises(InvalidSchema, match="nowhere.N"):
        parse("PROTOBUF", text, {})
    broken.dependency.append("missing.proto")
    with pytest.raises(InvalidSchema, match="missing.proto"):
        parse("PROTOBUF", base64.standard_b64encode(broken.SerializeToString()).decode("ascii"), {})
