"""The one place that says which (resource, operation) each API needs, and how a denial is answered.

Each rule gets the request before its handler does: it may answer it outright (the group and
ACL APIs), or take the topics the principal may not touch out of it and put them back into
the handler's response with TOPIC_AUTHORIZATION_FAILED (Produce, Fetch, Metadata, ...).
An API without a rule of its own needs ALTER (or DESCRIBE, for the APIs that only look) on
the cluster; without it the connection is closed with a log line: fail closed.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from headwater.broker.acl_operations import AclOperation as Op
from headwater.broker.security.acls import CLUSTER_NAME, Authorizer, ResourceType
from headwater.broker.security.connection import Connection
from headwater.broker.security.listeners import SecurityProtocol
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, ProtocolError

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED


@dataclass
class Access:
    """What one connection's principal may do."""
    authorizer: Authorizer
    conn: Connection
    allow_everyone_if_no_acl_found: bool

    def may(self, operation: Op, resource: ResourceType, name: str) -> bool:
        open_ = self.allow_everyone_if_no_acl_found or self.conn.listener.protocol is SecurityProtocol.PLAINTEXT
        return self.authorizer.authorize(self.conn.principal, self.conn.peer, operation, resource, name, open_)

    def topic(self, operation: Op, name: str | None) -> bool:
        return name is not None and self.may(operation, ResourceType.TOPIC, name)

    def cluster(self, operation: Op) -> bool:
        return self.may(operation, ResourceType.CLUSTER, CLUSTER_NAME)


Handle = Callable[[object], Awaitable[object]]  # the endpoint's handler, bound to broker and header


def _take_denied(request, field: str, allowed) -> list:
    """Take the entries of the request's list ``field`` that are not ``allowed`` out of it; return them."""
    entries = getattr(request, field)
    denied = [e for e in entries if not allowed(e)]
    setattr(request, field, [e for e in entries if e not in denied])
    return denied


async def _open(access, header, request, handle):
    return await handle(request)


async def _produce(access, header, request, handle):
    transaction_denied = request.transactional_id is not None and not access.may(
        Op.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id)
    denied = _take_denied(request, "topic_data", lambda t: not transaction_denied and access.topic(Op.WRITE, t.name))
    response = await handle(request) if request.topic_data or not denied else None
    if response is None and not denied or request.acks == 0:
        return response
    from kafka.protocol.producer import ProduceResponse
    Topic = ProduceResponse.TopicProduceResponse
    answered = response.responses if response is not None else []
    return ProduceResponse(throttle_time_ms=0, responses=answered + [
        Topic(name=t.name, partition_responses=[Topic.PartitionProduceResponse(index=p.index, error_code=TOPIC_DENIED)
                                                for p in t.partition_data]) for t in denied])


async def _fetch(access, header, request, handle):
    denied = _take_denied(request, "topics", lambda t: access.topic(Op.READ, t.topic))
    response = await handle(request)
    Topic = type(response).FetchableTopicResponse
    response.responses = list(response.responses) + [
        Topic(topic=t.topic, topic_id=t.topic_id, partitions=[
            Topic.PartitionData(partition_index=p.partition, error_code=TOPIC_DENIED, high_watermark=-1, records=None)
            for p in t.partitions]) for t in denied]
    return response


async def _list_offsets(access, header, request, handle):
    denied = _take_denied(request, "topics", lambda t: access.topic(Op.DESCRIBE, t.name))
    response = await handle(request)
    Topic = type(response).ListOffsetsTopicResponse
    response.topics = list(response.topics) + [
        Topic(name=t.name, partitions=[Topic.ListOffsetsPartitionResponse(partition_index=p.partition_index,
                                                                          error_code=TOPIC_DENIED)
                                       for p in t.partitions]) for t in denied]
    return response


async def _offset_for_leader_epoch(access, header, request, handle):
    if all(access.topic(Op.DESCRIBE, t.topic) for t in request.topics):
        return await handle(request)
    raise ProtocolError(f"{access.conn.principal} may not describe every topic of its OffsetForLeaderEpoch")


async def _metadata(access, header, request, handle):
    denied = []
    if request.topics:
        denied = [t.name for t in request.topics if t.name is not None and not access.topic(Op.DESCRIBE, t.name)]
        request.topics = [t for t in request.topics if t.name not in denied]
        if not request.topics and denied:  # an empty list would mean "all topics"
            request.topics = None
            response = await handle(request)
            response.topics = []
        else:
            response = await handle(request)
    else:
        response = await handle(request)
    Topic = type(response).MetadataResponseTopic
    response.topics = [t for t in response.topics if access.topic(Op.DESCRIBE, t.name)] + [
        Topic(name=name, error_code=TOPIC_DENIED) for name in denied]
    return response


def _group(operation: Op, name_of=lambda r: r.group_id or ""):
    async def rule(access, header, request, handle):
        if access.may(operation, ResourceType.GROUP, name_of(request)):
            return await handle(request)
        from headwater.broker.apis import ENDPOINTS
        return ENDPOINTS[header.api_key].api.response(error_code=GROUP_DENIED)
    return rule


async def _find_coordinator(access, header, request, handle):
    key_type = getattr(request, "key_type", 0)
    resource, code = ((ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED) if key_type == 1
                      else (ResourceType.GROUP, GROUP_DENIED))
    if access.may(Op.DESCRIBE, resource, request.key):
        return await handle(request)
    from kafka.protocol.metadata import FindCoordinatorResponse
    return FindCoordinatorResponse(error_code=code, error_message=None, node_id=-1, host="", port=-1)


async def _offset_commit(access, header, request, handle):
    group_allowed = access.may(Op.READ, ResourceType.GROUP, request.group_id)
    code = TOPIC_DENIED if group_allowed else GROUP_DENIED
    denied = _take_denied(request, "topics", lambda t: group_allowed and access.topic(Op.READ, t.name))
    response = await handle(request)
    Topic = type(response).OffsetCommitResponseTopic
    response.topics = list(response.topics) + [
        Topic(name=t.name, partitions=[Topic.OffsetCommitResponsePartition(partition_index=p.partition_index,
                                                                           error_code=code) for p in t.partitions])
        for t in denied]
    return response


async def _offset_fetch(access, header, request, handle):
    if access.may(Op.DESCRIBE, ResourceType.GROUP, request.group_id):
        response = await handle(request)
        response.topics = [t for t in response.topics if access.topic(Op.DESCRIBE, t.name)]
        return response
    from headwater.broker.apis import ENDPOINTS
    return ENDPOINTS[header.api_key].api.response(error_code=GROUP_DENIED, topics=[])


async def _list_groups(access, header, request, handle):
    response = await handle(request)
    response.groups = [g for g in response.groups if access.may(Op.DESCRIBE, ResourceType.GROUP, g.group_id)]
    return response


async def _describe_groups(access, header, request, handle):
    denied = _take_denied(request, "groups", lambda g: access.may(Op.DESCRIBE, ResourceType.GROUP, g))
    response = await handle(request)
    Group = type(response).DescribedGroup
    response.groups = list(response.groups) + [Group(error_code=GROUP_DENIED, group_id=g) for g in denied]
    return response


async def _create_topics(access, header, request, handle):
    cluster = access.cluster(Op.CREATE)
    denied = _take_denied(request, "topics", lambda t: cluster or access.topic(Op.CREATE, t.name))
    response = await handle(request)
    Result = type(response).CreatableTopicResult
    response.topics = list(response.topics) + [Result(name=t.name, error_code=TOPIC_DENIED,
                                                      error_message="not authorized") for t in denied]
    return response


async def _delete_topics(access, header, request, handle):
    denied = _take_denied(request, "topic_names", lambda n: access.topic(Op.DELETE, n))
    response = await handle(request)
    Result = type(response).DeletableTopicResult
    response.responses = list(response.responses) + [Result(name=n, error_code=TOPIC_DENIED) for n in denied]
    return response


async def _init_producer_id(access, header, request, handle):
    # Kafka 3.x: an idempotent producer needs no cluster permission (WRITE on each topic is checked per produce).
    if request.transactional_id is None or access.may(Op.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                      request.transactional_id):
        return await handle(request)
    from kafka.protocol.producer import InitProducerIdResponse
    return InitProducerIdResponse(error_code=TRANSACTIONAL_ID_DENIED, producer_id=-1, producer_epoch=-1)


async def _create_acls(access, header, request, handle):
    if access.cluster(Op.ALTER):
        return await handle(request)
    from kafka.protocol.admin import CreateAclsResponse
    return CreateAclsResponse(throttle_time_ms=0, results=[CreateAclsResponse.AclCreationResult(
        error_code=CLUSTER_DENIED, error_message="not authorized") for _ in request.creations])


async def _delete_acls(access, header, request, handle):
    if access.cluster(Op.ALTER):
        return await handle(request)
    from kafka.protocol.admin import DeleteAclsResponse
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=[DeleteAclsResponse.DeleteAclsFilterResult(
        error_code=CLUSTER_DENIED, error_message="not authorized", matching_acls=[]) for _ in request.filters])


def _transaction(transactional_id, group=None, topics=lambda r: (), answered: bool = True):
    """The transaction APIs: WRITE on the transactional id, READ on the group whose offsets it
    commits, WRITE on the topics it adds. ``answered``: the response has one error code to say no
    with; otherwise (per-partition results) the connection is closed."""
    async def rule(access, header, request, handle):
        checks = [(access.may(Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id(request) or ""),
                   TRANSACTIONAL_ID_DENIED)]
        if group is not None:
            checks.append((access.may(Op.READ, ResourceType.GROUP, group(request) or ""), GROUP_DENIED))
        checks.append((all(access.topic(Op.WRITE, name) for name in topics(request)), TOPIC_DENIED))
        denied = [code for allowed, code in checks if not allowed]
        if not denied:
            return await handle(request)
        if not answered:
            raise ProtocolError(f"{access.conn.principal} may not {header.api_name} (error {denied[0]})")
        from headwater.broker.apis import ENDPOINTS
        return ENDPOINTS[header.api_key].api.response(error_code=denied[0])
    return rule


def _cluster(operation: Op, code: int | None = None):
    """Needs ``operation`` on the cluster. With an error ``code`` the API's response carries it;
    without one the connection is closed (APIs whose denial has no answer of its own yet)."""
    async def rule(access, header, request, handle):
        if access.cluster(operation):
            return await handle(request)
        if code is None:
            raise ProtocolError(f"{access.conn.principal} may not {header.api_name} (needs {operation.name} "
                                f"on the cluster)")
        from headwater.broker.apis import ENDPOINTS
        return ENDPOINTS[header.api_key].api.response(error_code=code, error_message="not authorized")
    return rule


RULES = {
    ApiKey.API_VERSIONS: _open, ApiKey.SASL_HANDSHAKE: _open, ApiKey.SASL_AUTHENTICATE: _open,
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.METADATA: _metadata,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group(Op.READ), ApiKey.SYNC_GROUP: _group(Op.READ), ApiKey.HEARTBEAT: _group(Op.READ),
    ApiKey.LEAVE_GROUP: _group(Op.READ),
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    # Share groups: READ on the group (the topics' READ is not checked yet: ShareFetch names them by id).
    ApiKey.SHARE_GROUP_HEARTBEAT: _group(Op.READ), ApiKey.SHARE_FETCH: _group(Op.READ),
    ApiKey.SHARE_ACKNOWLEDGE: _group(Op.READ),
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _transaction(lambda r: r.v3_and_below_transactional_id,
                                               topics=lambda r: [t.name for t in r.v3_and_below_topics],
                                               answered=False),
    ApiKey.ADD_OFFSETS_TO_TXN: _transaction(lambda r: r.transactional_id, group=lambda r: r.group_id),
    ApiKey.END_TXN: _transaction(lambda r: r.transactional_id),
    ApiKey.TXN_OFFSET_COMMIT: _transaction(lambda r: r.transactional_id, group=lambda r: r.group_id,
                                           answered=False),
    ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE, CLUSTER_DENIED),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Op.DESCRIBE, CLUSTER_DENIED),
    ApiKey.CREATE_ACLS: _create_acls,
    ApiKey.DELETE_ACLS: _delete_acls,
}
LOOKING = ("DESCRIBE", "LIST")  # APIs named so only look: DESCRIBE on the cluster is enough


def rule_for(api_key: int):
    name = ApiKey(api_key).name
    return RULES.get(api_key) or _cluster(Op.DESCRIBE if name.startswith(LOOKING) else Op.ALTER)
