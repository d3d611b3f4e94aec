"""The Kafka request/response codec, sans-IO: frame bytes in, message objects out, and back.

Message bodies use kafka-python's classes, generated from Kafka's own JSON schemas (every
version, flexible ones included); writing ~40 APIs by hand would be slower and less
correct. What is ours: the request header (parsed by hand, so an unknown API or version
can still be answered or named), the response header rules, and the table of what we
advertise. Record batches stay opaque bytes here (see ``headwater.records``).
"""
from __future__ import annotations

import copy
import dataclasses
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from kafka.protocol import admin, consumer, metadata, producer, sasl
from kafka.protocol.schemas.fields.codecs import UUID

NO_UUID = uuid.UUID(int=0)

from headwater.protocol import consumer_group_messages as consumer_group
from headwater.protocol import fetch_request, produce_request, share_requests
from headwater.protocol import share_messages as share


# FindCoordinator's key types
GROUP_KEY, TRANSACTION_KEY = 0, 1


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


@dataclass(frozen=True)
class Api:
    key: ApiKey
    request: type
    response: type
    min_version: int
    max_version: int
    # The versions up to max_version whose request header, and whose response header, carry tagged
    # fields: a set looked in, where kafka-python's classmethod was called twice for every request.
    flexible_requests: frozenset[int] = frozenset()
    flexible_responses: frozenset[int] = frozenset()


# Classes per key; which of them the broker advertises depends on the handlers registered.
MESSAGE_CLASSES = {
    ApiKey.PRODUCE: (producer.ProduceRequest, producer.ProduceResponse),
    ApiKey.FETCH: (consumer.FetchRequest, consumer.FetchResponse),
    ApiKey.LIST_OFFSETS: (consumer.ListOffsetsRequest, consumer.ListOffsetsResponse),
    ApiKey.METADATA: (metadata.MetadataRequest, metadata.MetadataResponse),
    ApiKey.OFFSET_COMMIT: (consumer.OffsetCommitRequest, consumer.OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (consumer.OffsetFetchRequest, consumer.OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (metadata.FindCoordinatorRequest, metadata.FindCoordinatorResponse),
    ApiKey.JOIN_GROUP: (consumer.JoinGroupRequest, consumer.JoinGroupResponse),
    ApiKey.HEARTBEAT: (consumer.HeartbeatRequest, consumer.HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (consumer.LeaveGroupRequest, consumer.LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (consumer.SyncGroupRequest, consumer.SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (admin.DescribeGroupsRequest, admin.DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (admin.ListGroupsRequest, admin.ListGroupsResponse),
    ApiKey.SASL_HANDSHAKE: (sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse),
    ApiKey.API_VERSIONS: (metadata.ApiVersionsRequest, metadata.ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: (admin.CreateTopicsRequest, admin.CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (admin.DeleteTopicsRequest, admin.DeleteTopicsResponse),
    ApiKey.DELETE_RECORDS: (admin.DeleteRecordsRequest, admin.DeleteRecordsResponse),
    ApiKey.INIT_PRODUCER_ID: (producer.InitProducerIdRequest, producer.InitProducerIdResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (consumer.OffsetForLeaderEpochRequest, consumer.OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_ACLS: (admin.DescribeAclsRequest, admin.DescribeAclsResponse),
    ApiKey.CREATE_ACLS: (admin.CreateAclsRequest, admin.CreateAclsResponse),
    ApiKey.DELETE_ACLS: (admin.DeleteAclsRequest, admin.DeleteAclsResponse),
    ApiKey.DESCRIBE_CONFIGS: (admin.DescribeConfigsRequest, admin.DescribeConfigsResponse),
    ApiKey.ALTER_CONFIGS: (admin.AlterConfigsRequest, admin.AlterConfigsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (admin.DescribeLogDirsRequest, admin.DescribeLogDirsResponse),
    ApiKey.SASL_AUTHENTICATE: (sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse),
    ApiKey.DELETE_GROUPS: (admin.DeleteGroupsRequest, admin.DeleteGroupsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (admin.IncrementalAlterConfigsRequest, admin.IncrementalAlterConfigsResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (producer.AddPartitionsToTxnRequest, producer.AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (producer.AddOffsetsToTxnRequest, producer.AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (producer.EndTxnRequest, producer.EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (producer.WriteTxnMarkersRequest, producer.WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (producer.TxnOffsetCommitRequest, producer.TxnOffsetCommitResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (admin.DescribeTransactionsRequest, admin.DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (admin.ListTransactionsRequest, admin.ListTransactionsResponse),
    ApiKey.CREATE_PARTITIONS: (admin.CreatePartitionsRequest, admin.CreatePartitionsResponse),
    ApiKey.OFFSET_DELETE: (consumer.OffsetDeleteRequest, consumer.OffsetDeleteResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (admin.DescribeUserScramCredentialsRequest,
                                              admin.DescribeUserScramCredentialsResponse),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (admin.AlterUserScramCredentialsRequest,
                                           admin.AlterUserScramCredentialsResponse),
    ApiKey.DESCRIBE_CLUSTER: (admin.DescribeClusterRequest, admin.DescribeClusterResponse),
    ApiKey.DESCRIBE_PRODUCERS: (admin.DescribeProducersRequest, admin.DescribeProducersResponse),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (admin.DescribeTopicPartitionsRequest, admin.DescribeTopicPartitionsResponse),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (consumer_group.ConsumerGroupHeartbeatRequest,
                                      consumer_group.ConsumerGroupHeartbeatResponse),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (consumer_group.ConsumerGroupDescribeRequest,
                                     consumer_group.ConsumerGroupDescribeResponse),
    ApiKey.SHARE_GROUP_HEARTBEAT: (share.ShareGroupHeartbeatRequest, share.ShareGroupHeartbeatResponse),
    ApiKey.SHARE_GROUP_DESCRIBE: (share.ShareGroupDescribeRequest, share.ShareGroupDescribeResponse),
    ApiKey.SHARE_FETCH: (share.ShareFetchRequest, share.ShareFetchResponse),
    ApiKey.SHARE_ACKNOWLEDGE: (share.ShareAcknowledgeRequest, share.ShareAcknowledgeResponse),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (share.DescribeShareGroupOffsetsRequest,
                                          share.DescribeShareGroupOffsetsResponse),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (share.AlterShareGroupOffsetsRequest, share.AlterShareGroupOffsetsResponse),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (share.DeleteShareGroupOffsetsRequest, share.DeleteShareGroupOffsetsResponse),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (admin.DescribeClientQuotasRequest, admin.DescribeClientQuotasResponse),
    ApiKey.ALTER_CLIENT_QUOTAS: (admin.AlterClientQuotasRequest, admin.AlterClientQuotasResponse),
}


def api(key: ApiKey, min_version: int, max_version: int) -> Api:
    request, response = MESSAGE_CLASSES[key]
    spec = Api(key, request, response, min_version, max_version)
    versions = range(max_version + 1)   # from 0: an unknown ApiVersions version is answered in v0
    return dataclasses.replace(
        spec, flexible_requests=frozenset(v for v in versions if request.flexible_version_q(v)),
        flexible_responses=frozenset(v for v in versions if response_header_is_flexible(spec, v)))


class ProtocolError(Exception):
    """A request that cannot be answered: the connection is closed with this message logged."""


class UnsupportedVersion(Exception):
    def __init__(self, header: "RequestHeader"):
        super().__init__(f"{header.api_name} v{header.api_version} is not supported")
        self.header = header


@dataclass(slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def api_name(self) -> str:
        try:
            return ApiKey(self.api_key).name
        except ValueError:
            return f"api key {self.api_key}"


_HEADER_FIXED = struct.Struct(">hhih")


def _skip_tagged_fields(frame, pos: int) -> int:
    count, pos = _read_uvarint(frame, pos)
    for _ in range(count):
        _tag, pos = _read_uvarint(frame, pos)
        size, pos = _read_uvarint(frame, pos)
        pos += size
    return pos


def _read_uvarint(buf, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if pos >= len(buf) or shift > 28:
            raise ProtocolError("malformed varint in request header")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def parse_request(frame: bytes | memoryview, apis: dict[int, Api]):
    """Split a frame (without its size prefix) into (header, request body object). A request may
    keep views into the frame, so a frame must not change after it is parsed."""
    if len(frame) < _HEADER_FIXED.size:
        raise ProtocolError(f"request of {len(frame)} bytes is shorter than a request header")
    api_key, version, correlation_id, client_len = _HEADER_FIXED.unpack_from(frame)
    pos = _HEADER_FIXED.size + max(client_len, 0)
    if pos > len(frame):
        raise ProtocolError("client id runs past the end of the request")
    client_id = str(frame[_HEADER_FIXED.size:pos], "utf-8", "replace") if client_len >= 0 else None
    header = RequestHeader(api_key, version, correlation_id, client_id)
    spec = apis.get(api_key)
    if spec is None:
        raise ProtocolError(f"unknown API key {api_key} from client {client_id!r}")
    if not spec.min_version <= version <= spec.max_version:
        raise UnsupportedVersion(header)
    if version in spec.flexible_requests:
        pos = _skip_tagged_fields(frame, pos)
    if api_key != ApiKey.FETCH:
        decode = _decode_by_hand if api_key in _BY_HAND else _decode
        # spec.key.name, not header.api_name: the member is at hand, no lookup by value for every request
        return header, decode(spec, version, spec.key.name, memoryview(frame)[pos:])
    # An idle consumer without a fetch session may send the same body, naming every partition,
    # every fetch.wait.max.ms (kafka-python does; librdkafka turns its partition list round by one
    # each fetch, so its bodies differ): kept decoded once seen twice.
    body = bytes(memoryview(frame)[pos:])
    return header, _REPEATED_FETCHES.decode(version, body, lambda: _decode_by_hand(spec, version, "FETCH", body))


# Requests decoded by hand at the versions their modules cover (fetch_request: thousands of
# partitions per fetch; produce_request: a request per record or two from librdkafka;
# share_requests: a share consumer's every poll): API key -> (lowest version, highest version,
# decoder). Other versions go to the generated decoder.
_BY_HAND = {ApiKey.FETCH: (fetch_request.MIN_VERSION, fetch_request.MAX_VERSION, fetch_request.decode_fetch_request),
            ApiKey.PRODUCE: (produce_request.MIN_VERSION, produce_request.MAX_VERSION,
                             produce_request.decode_produce_request),
            ApiKey.SHARE_FETCH: (share_requests.VERSION, share_requests.VERSION,
                                 share_requests.decode_share_fetch_request),
            ApiKey.SHARE_ACKNOWLEDGE: (share_requests.VERSION, share_requests.VERSION,
                                       share_requests.decode_share_acknowledge_request)}


def _decode_by_hand(spec: Api, version: int, api_name: str, body):
    low, high, decode = _BY_HAND[spec.key]
    if not low <= version <= high:
        return _decode(spec, version, api_name, body)
    try:
        return decode(body, version)
    except ValueError as exc:
        raise ProtocolError(f"malformed {api_name} v{version} request: {exc}") from exc


class _RecentFetches:
    """Fetch bodies by version, the most recently seen kept within a budget of body bytes (decoded,
    a body takes several times its size), so a flood of distinct requests keeps no more than a few
    consumers' fetches do. A body is kept decoded from its second sight: a body seen once (all of
    librdkafka's) costs neither a copy of its decoding nor the memory of one kept.

    Looked up by a fingerprint (the version, the body's length and its first and last bytes),
    the body itself compared only once one is found: a dict keyed by the body hashed all of it
    on every fetch (~10 us at 1,000 partitions). Bodies that share a fingerprint replace each other."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes, self.kept_bytes = max_bytes, 0
        # fingerprint -> (body, its decoding once seen twice, else None), least recently seen first
        self._bodies: dict[tuple[int, int, bytes, bytes], tuple[bytes, object]] = {}

    def decode(self, version: int, body: bytes, decode: Callable[[], object]):
        """``body`` decoded: by ``decode``, or as a shallow copy of the one kept (authorization
        filters a request's topics by replacing them, so no request may hold the kept one)."""
        key = version, len(body), body[:_FINGERPRINT_BYTES], body[-_FINGERPRINT_BYTES:]
        kept = self._bodies.pop(key, None)
        if kept is not None:
            self.kept_bytes -= len(kept[0])
            if kept[0] == body:
                decoded = decode() if kept[1] is None else kept[1]
                self._keep(key, body, decoded)
                return copy.copy(decoded)
        self._keep(key, body, None)
        return decode()

    def _keep(self, key: tuple[int, int, bytes, bytes], body: bytes, decoded) -> None:
        if len(body) > self.max_bytes:
            return
        self._bodies[key] = body, decoded
        self.kept_bytes += len(body)
        while self.kept_bytes > self.max_bytes:
            oldest = next(iter(self._bodies))
            self.kept_bytes -= len(self._bodies.pop(oldest)[0])


# A fetch body's bytes at each end in its fingerprint: the last partition's entry (its fetch offset)
# differs between two fetches of one consumer, the head (max_wait, session) between consumers.
_FINGERPRINT_BYTES = 32
# About 256 KB: four librdkafka consumers on 2,000 partitions each (~60 KB a body).
_REPEATED_FETCHES = _RecentFetches(256 * 1024)


def _decode(spec: Api, version: int, api_name: str, body: bytes | memoryview):
    try:
        decoded = spec.request.decode(body, version=version)
    except Exception as exc:  # the generated decoder raises assorted errors on garbage
        raise ProtocolError(f"malformed {api_name} v{version} request: {exc!r}") from exc
    null = null_field(spec.request._struct, decoded, version)
    if null is not None:
        raise ProtocolError(f"malformed {api_name} v{version} request: {null} is null, "
                            "and the schema does not allow null there")
    return decoded


def null_field(struct, value, version: int, path: str = "") -> str | None:
    """The path of the first field that holds null where Kafka's schema says it may not
    (and the all-zero UUID back where the decoder left None).

    The generated decoder reads a length of -1 as None whatever the schema says; Kafka's own
    decoder refuses it. Checking here, once, spares every handler a ``None`` it cannot use.
    """
    for field in struct.untagged_fields(version):
        item = getattr(value, field.name)
        where = path + field.name
        if item is None and getattr(field, "_type", None) is UUID:
            # kafka-python reads the all-zero UUID (Kafka's "no topic ID") as None: put it back.
            setattr(value, field.name, NO_UUID)
        elif item is None:
            if not field.nullable_for_version_q(version):
                return where
        elif field.is_struct_array():
            if not _may_hold_null(field.array_of, version):
                continue   # numbers only (a fetch's thousands of partitions): nothing to look at
            for element in item:
                found = null_field(field.array_of, element, version, where + ".")
                if found is not None:
                    return found
        elif field.is_struct():
            found = null_field(field, item, version, where + ".")
            if found is not None:
                return found
        elif field.is_array() and None in item:  # the elements of []string are never nullable
            return where + "[]"
    return None


_NUMBERS = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32", "float64", "bool"})


_MAY_HOLD_NULL: dict[tuple[int, int], bool] = {}   # (id of a generated struct, version) -> answer


def _may_hold_null(struct, version: int) -> bool:
    """Whether a decoded ``struct`` can hold None anywhere: not when all its fields are numbers.
    (Structs live as long as kafka-python's classes, so their ids are stable keys.)"""
    key = (id(struct), version)
    if key not in _MAY_HOLD_NULL:
        _MAY_HOLD_NULL[key] = any(
            _may_hold_null(field.array_of if field.is_struct_array() else field, version)
            if field.is_struct_array() or field.is_struct() else field.type_str not in _NUMBERS
            for field in struct.untagged_fields(version))
    return _MAY_HOLD_NULL[key]


def response_header_is_flexible(spec: Api, version: int) -> bool:
    """Whether the response header carries a tagged-field byte: from the API's first flexible
    version on, except ApiVersions, whose responses always use header v0."""
    return spec.key != ApiKey.API_VERSIONS and spec.response.flexible_version_q(version)


def encode_response(header: RequestHeader, spec: Api, response, version: int | None = None) -> bytes:
    """Frame a response. ApiVersions always uses response header v0 (clients parse it before
    they know whether the broker is flexible); other flexible versions add a tagged-field byte."""
    version = header.api_version if version is None else version
    body = response.encode(version=version)
    flexible = version in spec.flexible_responses
    head = struct.pack(">ii", 4 + flexible + len(body), header.correlation_id)
    return b"".join((head, b"\x00" if flexible else b"", body))
