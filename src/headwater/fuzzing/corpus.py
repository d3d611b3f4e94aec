"""Valid requests for every advertised API and version: the seeds the fuzzer mutates and the
cases the codec's round-trip test runs.

Each request is built from Kafka's own schema (kafka-python's generated classes), field by
field, with values a real client would send: topics and groups that exist (or that the
corpus creates), a real record batch, small waits. What a field holds is decided by its
name, and for the ambiguous ``name`` by the structure around it.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass

from headwater.protocol.messages import Api, ApiKey
from headwater.records import Compression, Record, encode_batch

TOPIC = "fuzz"  # the topic the corpus reads and writes (two partitions, created by the campaign)
# Where hostile record batches go. Until produce validates records (issue 10 finding 6), a
# stored bad batch breaks later reads of its partition (ListOffsets by time fails on it);
# kept apart, those reads stay a finding of their own instead of masking every other one.
HOSTILE_TOPIC = "fuzz-hostile"
DOOMED_TOPIC = "fuzz-doomed"  # created and deleted by the corpus's CreateTopics and DeleteTopics
GROUP = "fuzz-group"
CLIENT_ID = "fuzzer"
TIMESTAMP = 1_700_000_000_000
# A consumer-protocol subscription (version 0, topics [fuzz], no user data), as JoinGroup carries.
SUBSCRIPTION = b"\x00\x00\x00\x00\x00\x01\x00\x04fuzz\xff\xff\xff\xff"


def record_batch(codec: Compression = Compression.NONE, count: int = 3) -> bytes:
    return encode_batch([Record(i, TIMESTAMP + i, b"key-%d" % i, b"value-%d" % i, [("h", b"v")])
                         for i in range(count)], compression=codec)


# Integer fields whose zero would be implausible or harmful (a long wait, a huge create).
INTS = {"acks": 1, "max_wait_ms": 10, "timeout_ms": 1000, "session_timeout_ms": 6000,
        "rebalance_timeout_ms": 1000, "num_partitions": 1, "replication_factor": 1, "timestamp": -1,
        "generation_id": -1, "generation_id_or_member_epoch": -1, "member_epoch": -1, "producer_id": -1,
        "producer_epoch": -1, "resource_type": 2, "replica_id": -1, "session_epoch": -1, "min_bytes": 1,
        "max_bytes": 1 << 20, "partition_max_bytes": 1 << 20, "current_leader_epoch": -1, "leader_epoch": -1,
        "committed_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1, "max_num_offsets": 1,
        "transaction_timeout_ms": 60_000, "retention_time_ms": -1, "commit_timestamp": -1, "replica_epoch": -1,
        "high_watermark": -1}
STRINGS = {"group_id": GROUP, "key": GROUP, "member_id": "", "protocol_type": "consumer", "protocol_name": "range",
           "topic": TOPIC, "resource_name": TOPIC, "committed_metadata": "", "value": "3600000", "rack_id": "",
           "client_software_name": "headwater-fuzzer", "client_software_version": "1.0"}
STRING_LISTS = {"groups": [GROUP], "groups_names": [GROUP], "coordinator_keys": [GROUP],
                "topic_names": [DOOMED_TOPIC], "configuration_keys": ["retention.ms"],
                "subscribed_topic_names": [TOPIC], "group_ids": [GROUP],

                "transactional_ids": ["fuzz-txn"], "state_filters": ["Ongoing"]}
EMPTY = {"assignments", "broker_ids", "forgotten_topics_data", "states_filter", "types_filter"}


@dataclass(frozen=True)
class Seed:
    """One valid request, and its frame (request header and body, without the size prefix)."""
    api: Api
    version: int
    request: object
    frame: bytes

    @property
    def name(self) -> str:
        return f"{self.api.key.name} v{self.version}"

    def decode(self):
        """A fresh copy of the request (with its header), to change and encode again."""
        return self.api.request.decode(self.frame, version=self.version, header=True)


def _value(field, version: int, parent: str):
    name = field.name
    if name in EMPTY:
        return []
    if field.is_struct_array():
        return [_struct(field, version, name)]
    if field.is_struct():
        return _struct(field, version, name)
    if field.is_array():
        return STRING_LISTS.get(name, [0])
    kind = field.type_str
    if kind == "records":
        return record_batch()
    if kind == "bytes":
        return SUBSCRIPTION if name == "metadata" else b""
    if kind == "uuid":
        return uuid.UUID(int=0)
    if kind == "bool":
        return False
    if kind == "string":
        if field.nullable_for_version_q(version) and name not in STRINGS:
            return None  # transactional ids, instance ids, reasons: absent, as most clients send them
        if name == "name":
            return {"configs": "retention.ms", "protocols": "range"}.get(parent, TOPIC)
        return STRINGS.get(name, "")
    return INTS.get(name, 0)


def _struct(field, version: int, name: str):
    values = {f.name: _value(f, version, name) for f in field.untagged_fields(version)}
    return field.data_class(version=version, **values)


def _request(api: Api, version: int):
    struct = api.request._struct
    values = {f.name: _value(f, version, "") for f in struct.untagged_fields(version)}
    if api.key in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS):
        values = _name_topics(values, DOOMED_TOPIC)
    if api.key == ApiKey.JOIN_GROUP:  # a group of its own: a join waits for the members already in its group
        values["group_id"] = f"{GROUP}-join-v{version}"
    return api.request(version=version, **values)


def _name_topics(values: dict, topic: str) -> dict:
    for item in values.get("topics", []):
        if getattr(item, "name", None) == TOPIC:
            item.name = topic
    return values


def field_paths(struct, obj, version: int, path: tuple[str, ...] = ()):
    """(path, field) of every field ``version`` carries, following the first element of arrays
    of structs: where a mutation can reach by name."""
    for field in struct.untagged_fields(version):
        where = path + (field.name,)
        yield where, field
        value = getattr(obj, field.name)
        if field.is_struct_array() and value:
            yield from field_paths(field.array_of, value[0], version, where)
        elif field.is_struct() and value is not None:
            yield from field_paths(field, value, version, where)


def non_nullable_paths(seed: "Seed") -> list[tuple[str, ...]]:
    """Paths of the length-prefixed fields (arrays, strings, bytes, structs) that Kafka's schema
    says may not be null: a count of -1 there is hostile."""
    return [path for path, field in field_paths(seed.api.request._struct, seed.request, seed.version)
            if (field.is_struct() or field.is_array() or field.type_str in ("string", "bytes", "records"))
            and not field.nullable_for_version_q(seed.version)]


def set_path(obj, path: tuple[str, ...], value) -> None:
    for name in path[:-1]:
        obj = getattr(obj, name)
        if isinstance(obj, list):
            obj = obj[0]
    setattr(obj, path[-1], value)


def encode_request(request, version: int, correlation_id: int = 1) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=CLIENT_ID)
    return bytes(request.encode(header=True, framed=False))


def valid_requests(apis: dict[int, Api]) -> list[Seed]:
    """One valid request per advertised API and version, in key and version order."""
    seeds = []
    for key in sorted(apis):
        api = apis[key]
        for version in range(api.min_version, api.max_version + 1):
            request = _request(api, version)
            seeds.append(Seed(api, version, request, encode_request(request, version)))
    return seeds
