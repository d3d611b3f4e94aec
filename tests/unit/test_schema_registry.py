"""The schema registry's state machine stepped in-process over a real ``_schemas`` log: ids and
versions, restarts, the soft and hard delete rules, references, settings, and bad input that
leaves the log as it was."""
from __future__ import annotations

import json

import pytest

from headwater.records import Record, encode_batch
from headwater.schemas.registry import COMPATIBILITY, LATEST, MODE, Registry, RegistryError, parse_version
from headwater.schemas.store import SCHEMAS_TOPIC, SchemasTopic

from .parts import close_appender, open_appender

MAX_SCHEMA_BYTES = 100_000


def avro(name: str, *fields: str) -> str:
    """A record whose fields have defaults, so that adding one is a compatible change at every level."""
    return json.dumps({"type": "record", "name": name,
                       "fields": [{"name": f, "type": "string", "default": ""} for f in fields]})


def open_registry(appender, clock) -> Registry:
    store = SchemasTopic(appender, clock)
    return Registry(store, clock, MAX_SCHEMA_BYTES)


@pytest.fixture
def registry(appender, clock):
    return open_registry(appender, clock)


def log_end(appender) -> int:
    return appender.log_manager.get_log(SCHEMAS_TOPIC, 0).log_end_offset


def refused(code: int, call, *args, **kwargs) -> RegistryError:
    with pytest.raises(RegistryError) as caught:
        call(*args, **kwargs)
    assert caught.value.code == code, caught.value.message
    return caught.value


def test_ids_are_global_and_versions_per_subject(registry, clock):
    first = registry.register("orders-value", "AVRO", avro("Order", "id"), [])
    assert registry.register("orders-value", "AVRO", avro("Order", "id"), []) == first   # no new version
    # the same schema written differently is the same schema
    assert registry.register("orders-value", "AVRO", json.dumps(json.loads(avro("Order", "id")), indent=4), []) == first
    clock.advance(1000)
    second = registry.register("orders-value", "AVRO", avro("Order", "id", "note"), [])
    assert registry.register("audit-value", "AVRO", avro("Order", "id"), []) == first   # another subject, same id
    assert (first, second) == (1, 2)
    assert registry.versions("orders-value") == [1, 2]
    assert registry.versions("audit-value") == [1]
    latest = registry.version("orders-value", LATEST)
    assert (latest.version, latest.id, latest.ts) == (2, second, clock.now_ms())
    assert [(v.subject, v.version) for v in registry.id_versions(first)] == [("audit-value", 1), ("orders-value", 1)]
    assert registry.subjects() == ["audit-value", "orders-value"]
    assert registry.lookup("orders-value", "AVRO", avro("Order", "id", "note"), []).version == 2
    refused(40403, registry.lookup, "orders-value", "AVRO", avro("Other", "x"), [])
    refused(40401, registry.lookup, "nobody", "AVRO", avro("Order", "id"), [])
    refused(40402, registry.version, "orders-value", 3)
    refused(40403, registry.by_id, 99)


def test_a_restart_keeps_every_schema_id_and_setting(tmp_path, clock):
    appender = open_appender(tmp_path / "data")
    registry = open_registry(appender, clock)
    ids = [registry.register(f"s{i}", "JSON", json.dumps({"type": "object", "title": f"t{i}"}), []) for i in range(3)]
    registry.set_setting(COMPATIBILITY, "s1", "full")
    registry.set_setting(MODE, None, "READONLY")
    registry.set_setting(MODE, None, "READWRITE")
    registry.delete_version("s2", 1)
    registry.delete_version("s2", 1, permanent=True)   # id 3 is gone, and never handed out again
    before = {s: [registry.version(s, v).to_json() for v in registry.versions(s)] for s in registry.subjects()}
    close_appender(appender)

    appender = open_appender(tmp_path / "data")
    again = open_registry(appender, clock)
    assert {s: [again.version(s, v).to_json() for v in again.versions(s)] for s in again.subjects()} == before
    assert again.compatibility("s1") == "FULL" and again.mode() == "READWRITE"
    refused(40403, again.by_id, ids[2])
    assert again.register("s3", "JSON", json.dumps({"type": "object", "title": "new"}), []) == ids[2] + 1
    close_appender(appender)


def test_soft_and_hard_deletes(registry):
    schema_id = registry.register("s", "AVRO", avro("A", "a"), [])
    registry.register("s", "AVRO", avro("A", "a", "b"), [])
    refused(40407, registry.delete_version, "s", 1, permanent=True)     # not soft-deleted first
    assert registry.delete_version("s", 1) == 1
    refused(40406, registry.delete_version, "s", 1)                     # soft-deleted already
    refused(40402, registry.version, "s", 1)
    assert registry.version("s", 1, deleted=True).deleted
    assert registry.versions("s") == [2] and registry.versions("s", deleted=True) == [1, 2]
    assert registry.by_id(schema_id).schema == avro("A", "a")           # the id still decodes
    refused(40405, registry.delete_subject, "s", permanent=True)        # version 2 is live
    assert registry.delete_subject("s") == [2]
    refused(40404, registry.delete_subject, "s")
    refused(40401, registry.versions, "s")
    assert registry.subjects() == [] and registry.subjects(deleted=True) == ["s"]
    assert registry.subjects(deleted_only=True) == ["s"]
    # the same schema again: a new version with its old id
    assert registry.register("s", "AVRO", avro("A", "a"), []) == schema_id
    assert registry.versions("s") == [3]
    registry.delete_subject("s")
    assert registry.delete_subject("s", permanent=True) == [1, 2, 3]
    refused(40401, registry.versions, "s", deleted=True)
    refused(40403, registry.by_id, schema_id)


def test_references_must_exist_and_keep_what_they_reference(registry, appender):
    registry.register("money", "AVRO", avro("Money", "currency"), [])
    end = log_end(appender)
    ref = {"name": "Money", "subject": "money", "version": 2}
    error = refused(42201, registry.register, "order", "AVRO", avro("Order", "id"), [ref])
    assert "money" in error.message
    refused(42201, registry.register, "order", "AVRO", avro("Order", "id"), [{"name": "Money"}])
    assert log_end(appender) == end                                     # nothing stored
    order_id = registry.register("order", "AVRO", avro("Order", "id"), [{**ref, "version": -1}])
    assert registry.version("order", 1).references[0].version == 1      # latest, pinned when registered
    assert registry.referenced_by("money", 1) == [order_id]
    refused(42206, registry.delete_version, "money", 1)
    refused(42206, registry.delete_subject, "money")
    registry.delete_subject("order")
    registry.delete_subject("money")                                    # its referrer is soft-deleted
    refused(42206, registry.delete_subject, "money", permanent=True)    # but still decodes by id
    registry.delete_subject("order", permanent=True)
    assert registry.delete_subject("money", permanent=True) == [1]


def test_bad_input_is_refused_and_nothing_is_stored(registry, appender):
    registry.register("s", "AVRO", avro("A", "a"), [])
    end = log_end(appender)
    refused(42201, registry.register, "s", "AVRO", "{not json", [])
    refused(42201, registry.register, "s", "XML", "<a/>", [])
    refused(42201, registry.register, "s", "AVRO", 12, [])
    big = json.dumps({"type": "record", "name": "Big", "doc": "x" * MAX_SCHEMA_BYTES, "fields": []})
    assert "message.max.bytes" in refused(42201, registry.register, "s", "AVRO", big, []).message
    refused(42203, registry.set_setting, COMPATIBILITY, "s", "SIDEWAYS")
    refused(42204, registry.set_setting, MODE, "s", "WRITEONLY")
    assert log_end(appender) == end
    for text in ("0", "x", str(2**31), "-2"):
        refused(42202, parse_version, text)
    assert parse_version("latest") == parse_version("-1") == LATEST


def test_settings_per_subject_fall_back_to_the_registry(registry):
    assert registry.compatibility() == "BACKWARD" and registry.mode() == "READWRITE"
    refused(40408, registry.compatibility, "s")
    assert registry.compatibility("s", default_to_global=True) == "BACKWARD"
    registry.set_setting(COMPATIBILITY, None, "forward_transitive")
    registry.set_setting(COMPATIBILITY, "s", "NONE")
    assert (registry.compatibility(), registry.compatibility("s")) == ("FORWARD_TRANSITIVE", "NONE")
    assert registry.delete_setting(COMPATIBILITY, "s") == "NONE"
    assert registry.compatibility("s", default_to_global=True) == "FORWARD_TRANSITIVE"
    assert registry.delete_setting(COMPATIBILITY, None) == "FORWARD_TRANSITIVE" and registry.compatibility() == "BACKWARD"
    refused(40409, registry.mode, "s")
    registry.set_setting(MODE, "s", "READONLY")
    refused(42205, registry.register, "s", "AVRO", avro("A", "a"), [])
    registry.register("t", "AVRO", avro("A", "a"), [])                  # other subjects still write
    refused(42205, registry.register, "t", "AVRO", avro("B", "b"), [], schema_id=7)  # ids only when importing
    refused(42205, registry.set_setting, MODE, None, "IMPORT")                   # there are subjects
    registry.delete_setting(MODE, "s")
    registry.set_setting(MODE, "u", "IMPORT")
    assert registry.register("u", "AVRO", avro("B", "b"), [], schema_id=42, number=5) == 42
    assert (registry.version("u", LATEST).version, registry.by_id(42).subject) == (5, "u")
    refused(42205, registry.register, "u", "AVRO", avro("C", "c"), [], schema_id=42)  # 42 is another schema
    registry.delete_setting(MODE, "u")
    assert registry.register("v", "AVRO", avro("D", "d"), []) == 43     # ids go on above imported ones


def test_records_another_writer_appends_are_applied_and_garbage_skipped(registry, appender):
    def append(key: bytes, value: bytes) -> None:
        appender.append(SCHEMAS_TOPIC, 0, encode_batch([Record(0, 0, key, value)]))

    append(b"not json", b"{}")
    append(json.dumps({"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}).encode(), b"[1]")
    append(json.dumps({"keytype": "CONFIG", "subject": None, "magic": 0}).encode(),
           json.dumps({"compatibilityLevel": "FULL"}).encode())
    append(json.dumps({"keytype": "SCHEMA", "subject": "x", "version": 1, "magic": 1}).encode(),
           json.dumps({"subject": "x", "version": 1, "id": 10, "schema": '"string"', "deleted": False}).encode())
    assert registry.compatibility() == "FULL"
    assert registry.version("x", 1).id == 10 and registry.by_id(10).schema_type == "AVRO"
    assert registry.register("y", "AVRO", '"string"', []) == 10
    assert registry.register("z", "AVRO", '"int"', []) == 11


def test_a_deleted_and_recreated_schemas_topic_is_read_from_its_start(registry, appender):
    registry.register("a", "AVRO", avro("A", "a"), [])
    registry.register("a", "AVRO", avro("A", "a", "b"), [])
    appender.log_manager.delete_topic(SCHEMAS_TOPIC)      # an operator's DeleteTopics: the next write recreates it
    assert registry.register("b", "AVRO", avro("B", "b"), []) == 3
    assert registry.versions("b") == [1]
    assert appender.log_manager.topics[SCHEMAS_TOPIC].config.compact
