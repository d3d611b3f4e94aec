"""The HTTP produce and read API, in the shape of Confluent REST Proxy v3's records API.

    GET  /v3/clusters                                             the one cluster
    GET  /v3/clusters/{cluster}/topics                            topics and their partition counts
    POST /v3/clusters/{cluster}/topics/{topic}/records            one record  -> its partition and offset
    POST /v3/clusters/{cluster}/topics/{topic}/records:batch      {"entries": [record + "id"]}
                                                                   -> {"successes": [...], "failures": [...]}
    GET  /v3/clusters/{cluster}/topics/{topic}/partitions/{p}/records?offset=N&max_records=M
                                                                   (Headwater's own: REST Proxy v3 cannot read)

A record is {"partition_id"?, "key"?, "value"?, "headers"?: [{"name", "value": base64}]}, key
and value as {"type": "JSON" | "STRING" | "BINARY" (base64), "data": ...}. Records read back
carry key and value as BINARY. Errors are {"error_code": HTTP status, "message": ...}, as the
REST Proxy answers them. Over its producer_byte_rate quota (client id from the
`Headwater-Client-Id` header, else "http"), charged by the body's bytes as read (a chunked
body has no Content-Length to trust), a produce is refused with 429 and Retry-After.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import time

import orjson

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.appender import ProduceResult
from headwater.broker.broker import Broker
from headwater.http.admin import Admin
from headwater.http.login import peer
from headwater.http.state import records_from, stable_offset
from headwater.broker.partitioner import keyed_partitions, partition_for
from headwater.protocol.quota_names import PRODUCER_BYTE_RATE
from headwater.broker.security.acls import ResourceType
from headwater.log import Topic
from headwater.protocol.errors import ErrorCode
from headwater.records import Record, encode_batch

MAX_READ = 1000  # records one read may return
DEFAULT_CLIENT_ID = "http"


class RestApi:
    def __init__(self, broker: Broker):
        self.broker = broker

    def app(self) -> Starlette:
        base = "/clusters/{cluster}/topics"
        return Starlette(routes=[  # the hot route first: routes are tried in order
            Route(base + "/{topic}/records:batch", self.produce_batch, methods=["POST"]),
            Route("/clusters", self.clusters),
            Route(base, self.topics),
            Route(base + "/{topic}/records", self.produce_one, methods=["POST"]),
            Route(base + "/{topic}/partitions/{partition:int}/records", self.read),
        ], exception_handlers={HTTPException: _error})

    async def clusters(self, request: Request) -> Response:
        return JSONResponse({"kind": "KafkaClusterList", "data": [{"cluster_id": self.broker.cluster_id}]})

    async def topics(self, request: Request) -> Response:
        self._cluster(request)
        topics = self.broker.log_manager.topics
        return JSONResponse({"kind": "KafkaTopicList", "data": [
            {"topic_name": name, "partitions_count": len(t.partitions)} for name, t in sorted(topics.items())]})

    async def produce_one(self, request: Request) -> Response:
        entry, size = await self._body(request)
        result = (await self._produce(request, [entry], size))[0]
        if "error_code" in result:
            raise HTTPException(result["error_code"], result["message"])
        return _JsonResponse(result)

    async def produce_batch(self, request: Request) -> Response:
        body, size = await self._body(request)
        entries = body.get("entries")
        if not isinstance(entries, list) or not entries:
            raise HTTPException(400, 'a batch is {"entries": [record, ...]} with at least one record')
        answer: dict[str, list[dict]] = {"successes": [], "failures": []}
        for result in await self._produce(request, entries, size):
            answer["failures" if "error_code" in result else "successes"].append(result)
        return _JsonResponse(answer, status_code=207 if answer["failures"] else 200)

    async def read(self, request: Request) -> Response:
        topic = self._topic(request)
        index = request.path_params["partition"]
        if not 0 <= index < len(topic.partitions):
            raise HTTPException(404, f"topic {topic.name!r} has no partition {index}")
        plog = topic.partitions[index]
        offset = _query_int(request, "offset", plog.log_start_offset)
        limit = min(_query_int(request, "max_records", 100), MAX_READ)
        if not plog.log_start_offset <= offset <= plog.log_end_offset:
            raise HTTPException(416, f"offset {offset} is outside {plog.log_start_offset}..{plog.log_end_offset}")
        return _JsonResponse({"kind": "KafkaRecordList", "data": [{
            "partition_id": index, "offset": r.offset, "timestamp": r.timestamp,
            "key": _binary(r.key), "value": _binary(r.value),
            "headers": [{"name": k, "value": None if v is None else base64.b64encode(v).decode()} for k, v in r.headers],
        } for r in records_from(plog, offset, limit, stable_offset(self.broker, topic.name, index, plog))]})

    # --- produce ---------------------------------------------------------------------------

    async def _produce(self, request: Request, entries: list, size: int) -> list[dict]:
        """Produce `entries`, read from a body of `size` bytes (what the quota is charged)."""
        client_id = request.headers.get("Headwater-Client-Id", DEFAULT_CLIENT_ID)
        return await produce(self.broker, self._topic(request), entries, client_id, size,
                             Admin(self.broker, getattr(request.state, "user", None), peer(request)))

    async def _body(self, request: Request) -> tuple[dict, int]:
        """The JSON object sent and its size in bytes as read. Reading stops past the limit:
        a chunked body (no Content-Length) is refused without being held whole."""
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise HTTPException(415, "send Content-Type: application/json")
        limit = self.broker.config.message_max_bytes
        too_large = HTTPException(413, f"the body exceeds {limit} bytes (message.max.bytes)")
        if int(request.headers.get("content-length") or 0) > limit:
            raise too_large
        raw = bytearray()
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > limit:
                raise too_large
        try:
            body = _json_loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HTTPException(400, f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise HTTPException(400, "the body must be a JSON object")
        return body, len(raw)

    def _cluster(self, request: Request) -> None:
        if request.path_params["cluster"] != self.broker.cluster_id:
            raise HTTPException(404, f"no cluster {request.path_params['cluster']!r}; "
                                f"this is {self.broker.cluster_id!r}")

    def _topic(self, request: Request):
        self._cluster(request)
        name = request.path_params["topic"]
        topic = self.broker.log_manager.topics.get(name)
        if topic is None or name.startswith("__"):
            raise HTTPException(404, f"no topic {name!r}")
        return topic


async def produce(broker: Broker, topic: Topic, entries: list, client_id: str, size: int, admin: Admin) -> list[dict]:
    """Append REST-shaped `entries` to `topic` (the REST API's and the console's one produce path):
    WRITE on the topic needed as a Kafka producer needs it, `size` bytes charged to `client_id`'s
    producer_byte_rate quota, acks=all durability."""
    if not admin.may(AclOperation.WRITE, ResourceType.TOPIC, topic.name):
        raise HTTPException(403, f"not authorized to write to topic {topic.name!r} (TOPIC_AUTHORIZATION_FAILED)")
    throttle = broker.quotas.charge(client_id, PRODUCER_BYTE_RATE, size)
    if throttle:
        raise HTTPException(429, f"client id {client_id!r} is over its producer_byte_rate quota; "
                            f"retry in {throttle:.2f} s", headers={"Retry-After": str(math.ceil(throttle))})
    now = int(time.time() * 1000)
    count = len(topic.partitions)
    results: list[dict | None] = [None] * len(entries)
    parsed = []
    for i, entry in enumerate(entries):
        try:
            parsed.append((i, *_record(entry, count)))
        except HTTPException as exc:
            results[i] = _failure(entry, exc.status_code, exc.detail)
    # The keys without a partition_id hashed all at once, then each record placed in entry order;
    # the keyless ones all on one partition, the next request's the next (as Kafka's sticky
    # partitioner keeps a batch of keyless records together): one log, so one fsync, for them.
    hashed = iter(keyed_partitions([key for _, partition, key, _, _ in parsed
                                    if partition is None and key is not None], count))
    sticky: int | None = None
    by_partition: dict[int, tuple[list[int], list[Record]]] = {}  # indexes in entries, records at their offset delta
    for i, partition, key, value, headers in parsed:
        if partition is None and key is None:
            if sticky is None:   # taken on the first keyless record: the turn moves once a request
                sticky = partition_for(None, count)
            partition = sticky
        elif partition is None:
            partition = next(hashed)
        placed = by_partition.get(partition)
        if placed is None:
            placed = by_partition[partition] = ([], [])
        placed[0].append(i)
        placed[1].append(Record(len(placed[1]), now, key, value, headers))
    appended = [(partition, *part) for partition, (indexes, records) in by_partition.items()
                for part in _append(broker, topic.name, partition, indexes, records)]
    appended = await _make_durable(broker, topic, appended)
    cluster_id, topic_name = broker.cluster_id, topic.name
    for partition, indexes, answer in appended:
        if answer.error != ErrorCode.NONE:
            status, message = 400 if answer.error == ErrorCode.MESSAGE_TOO_LARGE else 500, answer.message or answer.error.name
            for i in indexes:
                results[i] = _failure(entries[i], status, message)
            continue
        for offset, i in enumerate(indexes, answer.base_offset):
            entry = entries[i]
            success = {"id": entry["id"]} if "id" in entry else {}
            # assigned, not merged: the same fields in the same order at half the cost
            success["cluster_id"], success["topic_name"], success["partition_id"] = cluster_id, topic_name, partition
            success["offset"], success["timestamp"] = offset, now
            results[i] = success
    return results


Appended = list[tuple[int, list[int], ProduceResult]]  # partition, indexes in entries, the append's answer


def _append(broker: Broker, topic: str, partition: int, indexes: list[int],
            records: list[Record]) -> list[tuple[list[int], ProduceResult]]:
    """One batch, which the appender need not walk again (the broker encoded it); one refused as
    too large is halved and each half appended, as Kafka's producer splits such a batch and sends
    it again (a request's keyless records are one partition's, so one batch)."""
    answer = broker.appender.append(topic, partition, encode_batch(records), flush_policy=False,
                                    keyless=[n for n, r in enumerate(records) if r.key is None])
    if answer.error != ErrorCode.MESSAGE_TOO_LARGE or len(records) == 1:
        return [(indexes, answer)]
    half = len(records) // 2
    rest = [Record(n, r.timestamp, r.key, r.value, r.headers) for n, r in enumerate(records[half:])]
    return (_append(broker, topic, partition, indexes[:half], records[:half])
            + _append(broker, topic, partition, indexes[half:], rest))


async def _make_durable(broker: Broker, topic: Topic, appended: Appended) -> Appended:
    """Answer as an acks=all producer is (REST Proxy's producer default): with ``--flush always``,
    after the group commit's fsync of every partition appended to (one wait for them all)."""
    logs = {partition: topic.partitions[partition] for partition, _, answer in appended
            if answer.error == ErrorCode.NONE and broker.appender.must_be_durable(topic.partitions[partition], True)}
    failed = await broker.appender.fsync_rounds.durable(logs.values())
    if not failed:
        return appended
    answered = []
    for partition, indexes, answer in appended:
        plog = logs.get(partition)
        if answer.error == ErrorCode.NONE and plog in failed:   # a refused append keeps its own error
            answer = ProduceResult(ErrorCode.KAFKA_STORAGE_ERROR,
                                   message=f"cannot fsync {plog.directory}: {failed[plog]}")
        answered.append((partition, indexes, answer))
    return answered


def _record(entry, partitions: int) -> tuple[int | None, bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
    """An entry's partition (None: not given, for its key's murmur2 or the request's keyless
    partition to tell), key, value and headers."""
    if not isinstance(entry, dict):
        raise HTTPException(400, "a record must be a JSON object")
    key, value = _data(entry.get("key"), "key"), _data(entry.get("value"), "value")
    headers = []
    for header in entry.get("headers") or []:
        if not isinstance(header, dict) or not isinstance(header.get("name"), str):
            raise HTTPException(400, 'a header is {"name": string, "value": base64 or null}')
        headers.append((header["name"], _base64(header.get("value"), "header value")))
    partition = entry.get("partition_id")
    if partition is None:
        return None, key, value, headers
    if not isinstance(partition, int) or not 0 <= partition < partitions:
        raise HTTPException(400, f"partition_id {partition!r} is not one of 0..{partitions - 1}")
    return partition, key, value, headers


def _data(field, what: str) -> bytes | None:
    if field is None:
        return None
    if not isinstance(field, dict):
        raise HTTPException(400, f'{what} must be {{"type": "JSON" | "STRING" | "BINARY", "data": ...}}')
    kind = field.get("type", "JSON")
    decode = _DECODERS.get(kind) if isinstance(kind, str) else None
    if decode is None:
        raise HTTPException(400, f"{what} type {kind!r} is not JSON, STRING or BINARY")
    return decode(field.get("data"), what)


def _string(data, what: str) -> bytes:
    if not isinstance(data, str):
        raise HTTPException(400, f"{what} of type STRING needs a string")
    return data.encode()


def _json(data, what: str) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def _base64(data, what: str) -> bytes | None:
    if data is None:
        return None
    try:
        return binascii.a2b_base64(data, strict_mode=True)  # as b64decode(validate=True), with less around it
    except (binascii.Error, TypeError, ValueError):
        raise HTTPException(400, f"{what} is not base64") from None


_DECODERS = {"BINARY": _base64, "STRING": _string, "JSON": _json}


def _json_loads(raw: bytearray):
    """orjson's parse (several times json's), and json's for what only json takes (integers past
    64 bits, NaN), so a body json took before is still taken."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


class _JsonResponse(JSONResponse):
    """JSONResponse rendered by orjson: the same compact UTF-8 JSON, with less work per record."""

    def render(self, content) -> bytes:
        return orjson.dumps(content)


def _binary(data: bytes | None) -> dict | None:
    return None if data is None else {"type": "BINARY", "data": base64.b64encode(data).decode()}


def _id(entry) -> dict:
    return {"id": entry["id"]} if isinstance(entry, dict) and "id" in entry else {}


def _failure(entry, status: int, message: str) -> dict:
    return {**_id(entry), "error_code": status, "message": message}


def _query_int(request: Request, name: str, default: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise HTTPException(400, f"{name} must be an integer, got {text!r}") from None


async def _error(request: Request, exc: HTTPException) -> Response:
    return JSONResponse({"error_code": exc.status_code, "message": exc.detail}, status_code=exc.status_code,
                        headers=exc.headers)
