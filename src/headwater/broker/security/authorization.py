"""The one place that says which (resource, operation) each API needs, and how a denial is answered.

Each rule gets the request before its handler does, and answers a denial as Kafka does, in the
API's own response: per resource where the response has one result per resource (the entries
the principal may not touch are taken out of the request and put back into the handler's
response with TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED), with the
response's one error code otherwise, or by leaving out what the principal may not see (Metadata,
ListGroups, ListTransactions). The connection keeps serving. Every API in ``apis.ENDPOINTS`` has
a rule here (tests/integration/test_security.py walks them all); a request for an API without
one closes the connection: fail closed.
"""
from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.acls import CLUSTER_NAME, Authorizer, ResourceType
from headwater.broker.security.connection import Connection
from headwater.broker.security.listeners import SecurityProtocol
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import GROUP_KEY, TRANSACTION_KEY, ApiKey, ProtocolError

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NOT_AUTHORIZED = "not authorized"
CONFIG_TOPIC, CONFIG_GROUP = 2, 32  # DescribeConfigs/AlterConfigs resource types; the rest are the cluster's


@dataclass
class Access:
    """What one connection's principal may do."""
    authorizer: Authorizer
    conn: Connection
    allow_everyone_if_no_acl_found: bool
    topic_name: Callable[[uuid.UUID], str | None] = lambda topic_id: None  # ShareFetch names topics by id

    def may(self, operation: Op, resource: ResourceType, name: str) -> bool:
        open_ = self.allow_everyone_if_no_acl_found or self.conn.listener.protocol is SecurityProtocol.PLAINTEXT
        return self.authorizer.authorize(self.conn.principal, self.conn.peer, operation, resource, name, open_)

    def topic(self, operation: Op, name: str | None) -> bool:
        return name is not None and self.may(operation, ResourceType.TOPIC, name)

    def group(self, operation: Op, name: str | None) -> bool:
        return self.may(operation, ResourceType.GROUP, name or "")

    def cluster(self, operation: Op) -> bool:
        return self.may(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def config_resource(self, operation: Op, resource) -> ErrorCode | None:
        """DescribeConfigs/AlterConfigs: None if allowed, else the error that says no."""
        if resource.resource_type == CONFIG_TOPIC:
            return None if self.topic(operation, resource.resource_name) else TOPIC_DENIED
        if resource.resource_type == CONFIG_GROUP:
            return None if self.group(operation, resource.resource_name) else GROUP_DENIED
        return None if self.cluster(operation) else CLUSTER_DENIED


Handle = Callable[[object], Awaitable[object]]  # the endpoint's handler, bound to broker and header
Rule = Callable[[Access, object, object, Handle], Awaitable[object]]


def _take_denied(request, field: str, allowed) -> list:
    """Take the entries of the request's list ``field`` that are not ``allowed`` out of it; return them."""
    entries = getattr(request, field)
    denied = [e for e in entries if not allowed(e)]
    setattr(request, field, [e for e in entries if e not in denied])
    return denied


def _response(header, **fields):
    """The API's response with those of ``fields`` it has set (one error code saying no), empty lists elsewhere."""
    from headwater.broker.apis import ENDPOINTS
    cls = ENDPOINTS[header.api_key].api.response
    known = cls._struct.fields
    empty = {name: [] if f.is_array() else None for name, f in known.items() if f.is_array() or f.is_struct()}
    return cls(**{**empty, **{name: value for name, value in fields.items() if name in known}})


Check = Callable[[Access, object], ErrorCode | None]  # None: allowed; else the error that says no


def per_resource(field: str, check: Check, answers: str, denial: Callable[[type, object, ErrorCode], object]) -> Rule:
    """The entries of the request's list ``field`` that ``check`` refuses skip the handler and come back
    in the response's list ``answers`` as ``denial(response class, entry, error code)``."""
    async def rule(access, header, request, handle):
        codes = {id(entry): check(access, entry) for entry in getattr(request, field)}
        denied = _take_denied(request, field, lambda entry: codes[id(entry)] is None)
        # nothing left to ask: the handler is not called, as an empty list means "all" to some
        response = await handle(request) if getattr(request, field) or not denied else _response(header)
        if response is not None and denied:
            setattr(response, answers, list(getattr(response, answers)) + [
                denial(type(response), e, codes[id(e)]) for e in denied])
        return response
    return rule


def topic_check(operation: Op, name_of=lambda entry: entry.name) -> Check:
    return lambda access, entry: None if access.topic(operation, name_of(entry)) else TOPIC_DENIED


def _visible(answers: str, visible: Callable[[Access, object], bool]) -> Rule:
    """The response's list ``answers`` keeps only the entries the principal may see."""
    async def rule(access, header, request, handle):
        response = await handle(request)
        setattr(response, answers, [e for e in getattr(response, answers) if visible(access, e)])
        return response
    return rule


def _needs(allowed: Callable[[Access, object], bool], code: ErrorCode, then: Rule | None = None) -> Rule:
    """The whole request needs ``allowed``, else the response's one error code says ``code``; then ``then``."""
    async def rule(access, header, request, handle):
        if not allowed(access, request):
            return _response(header, error_code=code, error_message=NOT_AUTHORIZED)
        return await (then or _open)(access, header, request, handle)
    return rule


async def _open(access, header, request, handle):
    return await handle(request)


def _partitions(cls, field: str, indexes, **fields) -> list:
    return [cls(**{field: i}, **fields) for i in indexes]


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
        Topic(name=t.name, partition_responses=_partitions(Topic.PartitionProduceResponse, "index",
                                                           (p.index for p in t.partition_data),
                                                           error_code=TOPIC_DENIED)) for t in denied])


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


async def _describe_topic_partitions(access, header, request, handle):
    if request.topics:  # by name: each denied one answered; none named means all, filtered
        return await per_resource("topics", topic_check(Op.DESCRIBE), "topics", lambda R, t, code: (
            R.DescribeTopicPartitionsResponseTopic(error_code=code, name=t.name, topic_id=uuid.UUID(int=0),
                                                   partitions=[])))(access, header, request, handle)
    return await _visible("topics", lambda a, t: a.topic(Op.DESCRIBE, t.name))(access, header, request, handle)


async def _find_coordinator(access, header, request, handle):
    key_type = getattr(request, "key_type", GROUP_KEY)
    resource, code = ((ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED) if key_type == TRANSACTION_KEY
                      else (ResourceType.GROUP, GROUP_DENIED))
    if access.may(Op.DESCRIBE, resource, request.key):
        return await handle(request)
    return _response(header, error_code=code, node_id=-1, host="", port=-1)


def _group(operation: Op, then: Rule | None = None) -> Rule:
    return _needs(lambda a, r: a.group(operation, r.group_id), GROUP_DENIED, then)


def _group_check(operation: Op) -> Check:
    """For the APIs whose request lists group ids."""
    return lambda access, group_id: None if access.group(operation, group_id) else GROUP_DENIED


def _committed(topic_result: str, partition_result: str, whole: Callable[[Access, object], ErrorCode | None]) -> Rule:
    """Offsets (OffsetCommit, TxnOffsetCommit, OffsetDelete): each topic needs READ; if ``whole`` says
    no to the request (its group, its transactional id), every partition is answered with that error."""
    async def rule(access, header, request, handle):
        denied = whole(access, request)
        check = (lambda a, t: denied) if denied is not None else topic_check(Op.READ)
        return await _partition_results(check, topic_result, partition_result)(access, header, request, handle)
    return rule


def _group_read(access, request) -> ErrorCode | None:
    return None if access.group(Op.READ, request.group_id) else GROUP_DENIED


def _transaction_check(access, request) -> ErrorCode | None:
    return None if _transaction_writer(access, request.transactional_id) else TRANSACTIONAL_ID_DENIED


def _transactional_group(access, request) -> ErrorCode | None:
    return _transaction_check(access, request) or _group_read(access, request)


async def _offset_fetch(access, header, request, handle):
    if header.api_version >= 8:  # many groups: each denied one answered with its error
        denied = _take_denied(request, "groups", lambda g: access.group(Op.DESCRIBE, g.group_id))
        response = await handle(request) if request.groups or not denied else _response(header)
        for group in response.groups:
            group.topics = [t for t in group.topics if access.topic(Op.DESCRIBE, t.name)]
        Group = type(response).OffsetFetchResponseGroup
        response.groups += [Group(group_id=g.group_id, topics=[], error_code=GROUP_DENIED) for g in denied]
        return response
    if access.group(Op.DESCRIBE, request.group_id):
        response = await handle(request)
        response.topics = [t for t in response.topics if access.topic(Op.DESCRIBE, t.name)]
        return response
    # v0-1 have no error code of their own: each partition asked for carries it, as Kafka answers
    response = _response(header, error_code=GROUP_DENIED)
    Topic = type(response).OffsetFetchResponseTopic
    response.topics = [Topic(name=t.name, partitions=_partitions(
        Topic.OffsetFetchResponsePartition, "partition_index", t.partition_indexes, committed_offset=-1,
        metadata="", error_code=GROUP_DENIED)) for t in request.topics or ()]
    return response


async def _init_producer_id(access, header, request, handle):
    # Kafka 3.x: an idempotent producer needs no cluster permission (WRITE on each topic is checked per produce).
    if request.transactional_id is None or _transaction_writer(access, request.transactional_id):
        return await handle(request)
    return _response(header, error_code=TRANSACTIONAL_ID_DENIED, producer_id=-1, producer_epoch=-1)


def _transaction_writer(access, transactional_id: str | None) -> bool:
    return access.may(Op.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id or "")


async def _add_partitions_to_txn(access, header, request, handle):
    """WRITE on the transactional id and on each topic; as Kafka, a denied topic fails the whole request
    (the others answered OPERATION_NOT_ATTEMPTED), so a transaction never holds half its partitions."""
    topics = request.v3_and_below_topics
    if not _transaction_writer(access, request.v3_and_below_transactional_id):
        codes = {t.name: TRANSACTIONAL_ID_DENIED for t in topics}
    else:
        codes = {t.name: TOPIC_DENIED for t in topics if not access.topic(Op.WRITE, t.name)}
        if not codes:
            return await handle(request)
    response = _response(header)
    Topic = type(response).AddPartitionsToTxnTopicResult
    response.results_by_topic_v3_and_below = [
        Topic(name=t.name, results_by_partition=_partitions(
            Topic.AddPartitionsToTxnPartitionResult, "partition_index", t.partitions,
            partition_error_code=codes.get(t.name, ErrorCode.OPERATION_NOT_ATTEMPTED))) for t in topics]
    return response


def _transaction(check: Check = _transaction_check) -> Rule:
    """AddOffsetsToTxn, EndTxn: WRITE on the transactional id (and READ on the group whose offsets it adds)."""
    async def rule(access, header, request, handle):
        code = check(access, request)
        return await handle(request) if code is None else _response(header, error_code=code)
    return rule


def _cluster(operation: Op) -> Rule:
    """Needs ``operation`` on the cluster; the response's one error code says no."""
    return _needs(lambda a, r: a.cluster(operation), CLUSTER_DENIED)


async def _write_txn_markers(access, header, request, handle):
    """CLUSTER_ACTION on the cluster (an operator's super user, as Kafka), else every partition says so."""
    if access.cluster(Op.CLUSTER_ACTION):
        return await handle(request)
    response = _response(header)
    Marker = type(response).WritableTxnMarkerResult
    Topic = Marker.WritableTxnMarkerTopicResult
    response.markers = [Marker(producer_id=m.producer_id, topics=[Topic(name=t.name, partitions=_partitions(
        Topic.WritableTxnMarkerPartitionResult, "partition_index", t.partition_indexes, error_code=CLUSTER_DENIED))
        for t in m.topics]) for m in request.markers]
    return response


def _cluster_check(operation: Op) -> Check:
    return lambda access, entry: None if access.cluster(operation) else CLUSTER_DENIED


def _acls(field: str, answers: str, result: str, **empty) -> Rule:
    """Create/DeleteAcls: ALTER on the cluster, else each creation (filter) answered CLUSTER_AUTHORIZATION_FAILED."""
    return per_resource(field, _cluster_check(Op.ALTER), answers, lambda R, _, code: getattr(R, result)(
        error_code=code, error_message=NOT_AUTHORIZED, **empty))


async def _alter_user_scram_credentials(access, header, request, handle):
    if access.cluster(Op.ALTER):
        return await handle(request)
    response = _response(header)
    users = dict.fromkeys(c.name for c in [*request.deletions, *request.upsertions])
    response.results = [type(response).AlterUserScramCredentialsResult(
        user=user, error_code=CLUSTER_DENIED, error_message=NOT_AUTHORIZED) for user in users]
    return response


def _configs(operation: Op, answers: str, result: str, **empty) -> Rule:
    """Describe/Alter/IncrementalAlterConfigs: each resource needs ``operation`` on its topic, group or the cluster."""
    return per_resource("resources", lambda a, r: a.config_resource(operation, r), answers, lambda R, r, code: (
        getattr(R, result)(error_code=code, error_message=NOT_AUTHORIZED, resource_type=r.resource_type,
                           resource_name=r.resource_name, **empty)))


def _topic_results(check: Check, field: str, answers: str, result: str, name_of=lambda t: t.name) -> Rule:
    """APIs with one result per topic (name, error code, message)."""
    return per_resource(field, check, answers, lambda R, t, code: getattr(R, result)(
        name=name_of(t), error_code=code, error_message=NOT_AUTHORIZED))


def _partition_results(check: Check, topic_result: str, partition_result: str, answers: str = "topics",
                       name: str = "name", index: str = "partition_index",
                       indexes_of=lambda t: [p.partition_index for p in t.partitions], **fields) -> Rule:
    """APIs with one result per partition of each topic, each with its error code."""
    def denial(R, t, code):
        Topic = getattr(R, topic_result)
        return Topic(**{name: getattr(t, name)}, partitions=_partitions(getattr(Topic, partition_result), index,
                                                                        indexes_of(t), error_code=code, **fields))
    return per_resource("topics", check, answers, denial)


def _share(topic_result: str, **fields) -> Rule:
    """ShareFetch, ShareAcknowledge: READ on the group, then READ on each topic (named by id; an id the
    broker does not know is left to the handler to answer)."""
    def check(access, t):
        name = access.topic_name(t.topic_id)
        return None if name is None or access.topic(Op.READ, name) else TOPIC_DENIED

    def denial(R, t, code):
        Topic = getattr(R, topic_result)
        Partition = Topic.PartitionData
        return Topic(topic_id=t.topic_id, partitions=_partitions(
            Partition, "partition_index", (p.partition_index for p in t.partitions), error_code=code,
            error_message=NOT_AUTHORIZED, current_leader=Partition.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
            **fields))
    return _group(Op.READ, per_resource("topics", check, "responses", denial))


def _group_heartbeat(topic_operation: Op) -> Rule:
    """Share and consumer group heartbeats: READ on the group, ``topic_operation`` on every topic
    it subscribes to (READ for share groups, DESCRIBE for consumer groups, as Kafka)."""
    async def rule(access, header, request, handle):
        if not access.group(Op.READ, request.group_id):
            return _response(header, error_code=GROUP_DENIED, error_message=NOT_AUTHORIZED)
        if not all(access.topic(topic_operation, name) for name in request.subscribed_topic_names or ()):
            return _response(header, error_code=TOPIC_DENIED, error_message=NOT_AUTHORIZED)
        return await handle(request)
    return rule


async def _describe_share_group_offsets(access, header, request, handle):
    """DESCRIBE on each group, and on each topic named (all topics asked for: those without it left out)."""
    denied_groups = _take_denied(request, "groups", lambda g: access.group(Op.DESCRIBE, g.group_id))
    denied_topics = {g.group_id: _take_denied(g, "topics", lambda t: access.topic(Op.DESCRIBE, t.topic_name))
                     for g in request.groups if g.topics is not None}
    response = await handle(request) if request.groups else _response(header)
    Group = type(response).DescribeShareGroupOffsetsResponseGroup
    Topic = Group.DescribeShareGroupOffsetsResponseTopic
    for group in response.groups:
        group.topics = [t for t in group.topics if access.topic(Op.DESCRIBE, t.topic_name)] + [
            Topic(topic_name=t.topic_name, partitions=_partitions(
                Topic.DescribeShareGroupOffsetsResponsePartition, "partition_index", t.partitions, start_offset=-1,
                leader_epoch=-1, lag=-1, error_code=TOPIC_DENIED, error_message=NOT_AUTHORIZED))
            for t in denied_topics.get(group.group_id, [])]
    response.groups += [Group(group_id=g.group_id, topics=[], error_code=GROUP_DENIED, error_message=NOT_AUTHORIZED)
                        for g in denied_groups]
    return response


def _described_group_denied(R, group_id: str, code: ErrorCode):
    return R.DescribedGroup(error_code=code, error_message=NOT_AUTHORIZED, group_id=group_id, members=[])


def _create_topic(access, topic) -> ErrorCode | None:
    """CREATE on the cluster, or else on the topic (as Kafka)."""
    return None if access.cluster(Op.CREATE) or access.topic(Op.CREATE, topic.name) else TOPIC_DENIED


def _topic(entry) -> str:  # Fetch and OffsetForLeaderEpoch name their topics and partitions so
    return entry.topic


def _partition(entry) -> list[int]:
    return [p.partition for p in entry.partitions]


async def _fetch(access, header, request, handle):
    """READ on each topic the answer carries, checked after the read: within a fetch session (KIP-227)
    partitions are read without being named, and READ may have been revoked since the session began.
    Nothing read from a topic without READ leaves; its partitions are answered with the denial."""
    response = await handle(request)
    Partition = type(response).FetchableTopicResponse.PartitionData
    for topic in response.responses:
        if not access.topic(Op.READ, topic.topic):
            topic.partitions = _partitions(Partition, "partition_index", (p.partition_index for p in topic.partitions),
                                           error_code=TOPIC_DENIED, high_watermark=-1, records=None)
    return response


RULES: dict[int, Rule] = {
    ApiKey.API_VERSIONS: _open, ApiKey.SASL_HANDSHAKE: _open, ApiKey.SASL_AUTHENTICATE: _open,
    ApiKey.DESCRIBE_CLUSTER: _open,  # as Kafka: the brokers are no secret (Metadata lists them too)
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.METADATA: _metadata,
    ApiKey.LIST_OFFSETS: _partition_results(topic_check(Op.DESCRIBE), "ListOffsetsTopicResponse",
                                            "ListOffsetsPartitionResponse"),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _partition_results(topic_check(Op.DESCRIBE, _topic), "OffsetForLeaderTopicResult",
                                                       "EpochEndOffset", name="topic", index="partition",
                                                       indexes_of=_partition, leader_epoch=-1, end_offset=-1),
    ApiKey.DELETE_RECORDS: _partition_results(topic_check(Op.DELETE), "DeleteRecordsTopicResult",
                                              "DeleteRecordsPartitionResult", low_watermark=-1),
    ApiKey.DESCRIBE_PRODUCERS: _partition_results(topic_check(Op.READ), "TopicResponse", "PartitionResponse",
                                                  indexes_of=lambda t: t.partition_indexes,
                                                  error_message=NOT_AUTHORIZED, active_producers=[]),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    ApiKey.CREATE_TOPICS: _topic_results(_create_topic, "topics", "topics", "CreatableTopicResult"),
    ApiKey.DELETE_TOPICS: _topic_results(topic_check(Op.DELETE, lambda name: name), "topic_names", "responses",
                                         "DeletableTopicResult", name_of=lambda name: name),
    ApiKey.CREATE_PARTITIONS: _topic_results(topic_check(Op.ALTER), "topics", "results", "CreatePartitionsTopicResult"),
    ApiKey.DESCRIBE_CONFIGS: _configs(Op.DESCRIBE_CONFIGS, "results", "DescribeConfigsResult", configs=[]),
    ApiKey.ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses", "AlterConfigsResourceResponse"),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(Op.ALTER_CONFIGS, "responses", "AlterConfigsResourceResponse"),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(Op.DESCRIBE),
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group(Op.READ), ApiKey.SYNC_GROUP: _group(Op.READ), ApiKey.HEARTBEAT: _group(Op.READ),
    ApiKey.LEAVE_GROUP: _group(Op.READ),
    ApiKey.LIST_GROUPS: _visible("groups", lambda a, g: a.group(Op.DESCRIBE, g.group_id)),
    ApiKey.DESCRIBE_GROUPS: per_resource("groups", _group_check(Op.DESCRIBE), "groups",
                                         lambda R, g, code: R.DescribedGroup(error_code=code, group_id=g)),
    ApiKey.DELETE_GROUPS: per_resource("groups_names", _group_check(Op.DELETE), "results",
                                       lambda R, g, code: R.DeletableGroupResult(group_id=g, error_code=code)),
    ApiKey.OFFSET_COMMIT: _committed("OffsetCommitResponseTopic", "OffsetCommitResponsePartition", _group_read),
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.OFFSET_DELETE: _group(Op.DELETE, _committed("OffsetDeleteResponseTopic", "OffsetDeleteResponsePartition",
                                                       lambda a, r: None)),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _group_heartbeat(Op.DESCRIBE),
    ApiKey.CONSUMER_GROUP_DESCRIBE: per_resource("group_ids", _group_check(Op.DESCRIBE), "groups",
                                                 _described_group_denied),
    ApiKey.SHARE_GROUP_HEARTBEAT: _group_heartbeat(Op.READ),
    ApiKey.SHARE_GROUP_DESCRIBE: per_resource("group_ids", _group_check(Op.DESCRIBE), "groups",
                                              _described_group_denied),
    ApiKey.SHARE_FETCH: _share("ShareFetchableTopicResponse", acknowledge_error_code=0, records=None,
                               acquired_records=[]),
    ApiKey.SHARE_ACKNOWLEDGE: _share("ShareAcknowledgeTopicResponse"),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: _describe_share_group_offsets,
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: _group(Op.READ, _partition_results(
        topic_check(Op.READ, lambda t: t.topic_name), "AlterShareGroupOffsetsResponseTopic",
        "AlterShareGroupOffsetsResponsePartition", answers="responses", name="topic_name",
        error_message=NOT_AUTHORIZED)),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: _group(Op.DELETE, per_resource(
        "topics", topic_check(Op.READ, lambda t: t.topic_name), "responses",
        lambda R, t, code: R.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, error_code=code,
                                                                  error_message=NOT_AUTHORIZED))),
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _transaction(_transactional_group),
    ApiKey.END_TXN: _transaction(),
    ApiKey.WRITE_TXN_MARKERS: _write_txn_markers,
    ApiKey.TXN_OFFSET_COMMIT: _committed("TxnOffsetCommitResponseTopic", "TxnOffsetCommitResponsePartition",
                                         _transactional_group),
    ApiKey.DESCRIBE_TRANSACTIONS: per_resource(
        "transactional_ids", lambda a, t: None if a.may(Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t)
        else TRANSACTIONAL_ID_DENIED, "transaction_states",
        lambda R, t, code: R.TransactionState(error_code=code, transactional_id=t, transaction_state="", topics=[])),
    ApiKey.LIST_TRANSACTIONS: _visible("transaction_states", lambda a, t: a.may(
        Op.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)),
    ApiKey.DESCRIBE_ACLS: _cluster(Op.DESCRIBE),
    ApiKey.CREATE_ACLS: _acls("creations", "results", "AclCreationResult"),
    ApiKey.DELETE_ACLS: _acls("filters", "filter_results", "DeleteAclsFilterResult", matching_acls=[]),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(Op.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_user_scram_credentials,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(Op.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: per_resource("entries", _cluster_check(Op.ALTER_CONFIGS), "entries",
                                             lambda R, e, code: R.EntryData(
                                                 error_code=code, error_message=NOT_AUTHORIZED, entity=[
                                                     R.EntryData.EntityData(entity_type=x.entity_type,
                                                                            entity_name=x.entity_name)
                                                     for x in e.entity])),
}


async def _unruled(access, header, request, handle):
    raise ProtocolError(f"{header.api_name} has no authorization rule")  # fail closed


def rule_for(api_key: int) -> Rule:
    return RULES.get(api_key, _unruled)
