"""The codec, in-process (issue 12): every advertised API and version, from the fuzzer's corpus
of valid requests, goes through ``parse_request``, the real handler on a real ``Broker``,
and ``encode_response``; what a client's decoder (kafka-python's) reads back is what the
handler answered, field by field."""
import asyncio
import io
import struct

import pytest
from kafka.protocol.api_header import ResponseHeader

from headwater.broker.broker import Broker
from headwater.broker.config import BrokerConfig
from headwater.broker.apis import ADVERTISED, ENDPOINTS
from headwater.fuzzing.corpus import TOPIC, non_nullable_paths, set_path, valid_requests
from headwater.protocol.messages import (ApiKey, ProtocolError, encode_response, parse_request,
                                         response_header_is_flexible)

APIS = ADVERTISED
SEEDS = valid_requests(APIS)
# From Kafka's schemas: the first version whose response header has tagged fields (ApiVersions never has).
FIRST_FLEXIBLE = {ApiKey.PRODUCE: 9, ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 6, ApiKey.METADATA: 9,
                  ApiKey.OFFSET_COMMIT: 8, ApiKey.OFFSET_FETCH: 6, ApiKey.FIND_COORDINATOR: 3, ApiKey.JOIN_GROUP: 6,
                  ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 4, ApiKey.SYNC_GROUP: 4, ApiKey.DESCRIBE_GROUPS: 5,
                  ApiKey.LIST_GROUPS: 3, ApiKey.CREATE_TOPICS: 5, ApiKey.DELETE_TOPICS: 4, ApiKey.DELETE_RECORDS: 2,
                  ApiKey.INIT_PRODUCER_ID: 2, ApiKey.OFFSET_FOR_LEADER_EPOCH: 4, ApiKey.DESCRIBE_CONFIGS: 4,
                  ApiKey.ALTER_CONFIGS: 2, ApiKey.DESCRIBE_LOG_DIRS: 2, ApiKey.DELETE_GROUPS: 2,
                  ApiKey.INCREMENTAL_ALTER_CONFIGS: 1, ApiKey.CREATE_PARTITIONS: 2, ApiKey.DESCRIBE_CLUSTER: 0,
                  ApiKey.DESCRIBE_PRODUCERS: 0, ApiKey.DESCRIBE_TOPIC_PARTITIONS: 0,
                  ApiKey.CONSUMER_GROUP_HEARTBEAT: 0, ApiKey.CONSUMER_GROUP_DESCRIBE: 0,
                  ApiKey.SHARE_GROUP_HEARTBEAT: 0, ApiKey.SHARE_GROUP_DESCRIBE: 1,
                  ApiKey.SHARE_FETCH: 0, ApiKey.SHARE_ACKNOWLEDGE: 0,
                  ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: 0, ApiKey.ALTER_SHARE_GROUP_OFFSETS: 0,
                  ApiKey.DELETE_SHARE_GROUP_OFFSETS: 0,
                  ApiKey.SASL_AUTHENTICATE: 2, ApiKey.DESCRIBE_ACLS: 2, ApiKey.CREATE_ACLS: 2, ApiKey.DELETE_ACLS: 2,
                  ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0, ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
                  ApiKey.DESCRIBE_CLIENT_QUOTAS: 1, ApiKey.ALTER_CLIENT_QUOTAS: 1,
                  ApiKey.ADD_PARTITIONS_TO_TXN: 3,
                  ApiKey.ADD_OFFSETS_TO_TXN: 3, ApiKey.END_TXN: 3, ApiKey.WRITE_TXN_MARKERS: 1, ApiKey.TXN_OFFSET_COMMIT: 3,
                  ApiKey.DESCRIBE_TRANSACTIONS: 0, ApiKey.LIST_TRANSACTIONS: 0}  # OffsetDelete, SaslHandshake: never


def test_corpus_covers_every_advertised_version():
    advertised = {(int(a.key), v) for a in APIS.values() for v in range(a.min_version, a.max_version + 1)}
    assert {(int(s.api.key), s.version) for s in SEEDS} == advertised
    assert (ApiKey.PRODUCE, 8) in advertised and (ApiKey.FETCH, 11) in advertised


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
def test_request_round_trip(seed):
    header, body = parse_request(seed.frame, APIS)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == \
        (seed.api.key, seed.version, 1, "fuzzer")
    assert schema_values(seed.api.request._struct, body, seed.version) == \
        schema_values(seed.api.request._struct, seed.request, seed.version)


def schema_values(struct_field, obj, version: int):
    """Plain-Python values of the fields ``version`` carries: the ground truth to compare."""
    if obj is None:
        return None
    values = {}
    for field in struct_field.untagged_fields(version):
        value = getattr(obj, field.name)
        if field.is_struct_array() and value is not None:
            value = [schema_values(field.array_of, v, version) for v in value]
        elif field.is_struct():
            value = schema_values(field, value, version)
        elif isinstance(value, memoryview):
            value = bytes(value)
        values[field.name] = value
    return values


def test_responses_round_trip_through_the_real_handlers(tmp_path):
    async def scenario():
        broker = Broker(BrokerConfig(data_dir=tmp_path))
        broker.log_manager.create_topic(TOPIC, 2)
        try:
            for seed in SEEDS:
                header, request = parse_request(seed.frame, APIS)
                spec, handler = ENDPOINTS[header.api_key].api, ENDPOINTS[header.api_key].handle
                response = await asyncio.wait_for(handler(broker, header, request), 30)
                frame = encode_response(header, spec, response)
                (size,) = struct.unpack_from(">i", frame)
                assert size == len(frame) - 4, seed.name
                stream = io.BytesIO(frame[4:])
                flexible = response_header_is_flexible(spec, seed.version)
                assert ResponseHeader.decode(stream, flexible=flexible).correlation_id == 1
                assert stream.tell() == 4 + flexible and flexible == (seed.version >= FIRST_FLEXIBLE.get(spec.key, 99))
                decoded = spec.response.decode(frame[4 + stream.tell():], version=seed.version)
                assert schema_values(spec.response._struct, decoded, seed.version) == \
                    schema_values(spec.response._struct, response, seed.version), seed.name
        finally:
            broker.close()
    asyncio.run(scenario())


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: s.name)
def test_null_where_the_schema_forbids_it_is_refused(seed):
    """Finding 8 of issue 10: every non-nullable array, string or struct set to null (count -1)
    is refused by the codec, naming the field, before any handler sees it."""
    for path in non_nullable_paths(seed):
        request = seed.decode()
        set_path(request, path, None)
        with pytest.raises(ProtocolError, match=f"{'.'.join(path)} is null"):
            parse_request(bytes(request.encode(header=True)), APIS)
