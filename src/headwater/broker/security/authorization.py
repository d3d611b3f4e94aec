"""How an API's authorization rule is written and applied; each API's rule is in its row of
``apis.ENDPOINTS``, beside its handler (and, when it is more than one of the pieces below, in the
handler's module).

Each rule gets the request before its handler does, and answers a denial as Kafka does, in the
API's own response: per resource where the response has one result per resource (the entries
the principal may not touch are taken out of the request and put back into the handler's
response with TOPIC_/GROUP_/CLUSTER_/TRANSACTIONAL_ID_AUTHORIZATION_FAILED), with the
response's one error code otherwise, or by leaving out what the principal may not see (Metadata,
ListGroups, ListTransactions). The connection keeps serving. An endpoint cannot be made without
a rule; tests/broker/security/test_security.py walks them all.
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
from headwater.protocol.messages import MESSAGE_CLASSES

TOPIC_DENIED = ErrorCode.TOPIC_AUTHORIZATION_FAILED
GROUP_DENIED = ErrorCode.GROUP_AUTHORIZATION_FAILED
CLUSTER_DENIED = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
TRANSACTIONAL_ID_DENIED = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
NOT_AUTHORIZED = "not authorized"


@dataclass
class Access:
    """What one connection's principal may do."""
    authorizer: Authorizer
    conn: Connection
    allow_everyone_if_no_acl_found: bool
    topic_name: Callable[[uuid.UUID], str | None] = lambda topic_id: None  # ShareFetch names topics by id

    def __post_init__(self) -> None:
        # whether a resource without ACLs is open to this connection: its listener's, fixed for its life
        self._open = self.allow_everyone_if_no_acl_found or self.conn.listener.protocol is SecurityProtocol.PLAINTEXT

    def may(self, operation: Op, resource: ResourceType, name: str) -> bool:
        return self.authorizer.authorize(self.conn.principal, self.conn.peer, operation, resource, name, self._open)

    def topic(self, operation: Op, name: str | None) -> bool:
        return name is not None and self.may(operation, ResourceType.TOPIC, name)

    def group(self, operation: Op, name: str | None) -> bool:
        return self.may(operation, ResourceType.GROUP, name or "")

    def cluster(self, operation: Op) -> bool:
        return self.may(operation, ResourceType.CLUSTER, CLUSTER_NAME)

    def transactional_id(self, operation: Op, name: str | None) -> bool:
        return self.may(operation, ResourceType.TRANSACTIONAL_ID, name or "")


Handle = Callable[[object], Awaitable[object]]  # the endpoint's handler, bound to broker and header
Rule = Callable[[Access, object, object, Handle], Awaitable[object]]
Check = Callable[[Access, object], ErrorCode | None]  # None: allowed; else the error that says no
Denial = Callable[[object, ErrorCode], object]  # a refused entry and its error -> its entry in the response


def take_denied(request, field: str, allowed) -> list:
    """Take the entries of the request's list ``field`` that are not ``allowed`` out of it; return them."""
    entries = getattr(request, field)
    denied = [e for e in entries if not allowed(e)]
    if denied:   # most requests are allowed whole: their list stays as it is
        setattr(request, field, [e for e in entries if e not in denied])
    return denied


def empty_response(header, **fields):
    """The API's response with those of ``fields`` it has set (one error code saying no), empty lists elsewhere."""
    cls = MESSAGE_CLASSES[header.api_key][1]
    known = cls._struct.fields
    empty = {name: [] if f.is_array() else None for name, f in known.items() if f.is_array() or f.is_struct()}
    return cls(**{**empty, **{name: value for name, value in fields.items() if name in known}})


def partition_answers(cls, field: str, indexes, **fields) -> list:
    """One ``cls`` per partition index, each with ``fields`` (its error code)."""
    return [cls(**{field: i}, **fields) for i in indexes]


def per_resource(field: str, check: Check, answers: str, denial: Denial) -> Rule:
    """The entries of the request's list ``field`` that ``check`` refuses skip the handler and come back
    in the response's list ``answers`` as ``denial(entry, error code)``."""
    async def rule(access, header, request, handle):
        codes = {id(entry): check(access, entry) for entry in getattr(request, field)}
        denied = take_denied(request, field, lambda entry: codes[id(entry)] is None)
        # nothing left to ask: the handler is not called, as an empty list means "all" to some
        response = await handle(request) if getattr(request, field) or not denied else empty_response(header)
        if response is not None and denied:
            setattr(response, answers, list(getattr(response, answers)) + [denial(e, codes[id(e)]) for e in denied])
        return response
    return rule


def topic_check(operation: Op, name_of=lambda entry: entry.name) -> Check:
    return lambda access, entry: None if access.topic(operation, name_of(entry)) else TOPIC_DENIED


def visible(answers: str, may_see: Callable[[Access, object], bool]) -> Rule:
    """The response's list ``answers`` keeps only the entries the principal may see."""
    async def rule(access, header, request, handle):
        response = await handle(request)
        setattr(response, answers, [e for e in getattr(response, answers) if may_see(access, e)])
        return response
    return rule


def needs(allowed: Callable[[Access, object], bool], code: ErrorCode, then: Rule | None = None) -> Rule:
    """The whole request needs ``allowed``, else the response's one error code says ``code``; then ``then``."""
    async def rule(access, header, request, handle):
        if not allowed(access, request):
            return empty_response(header, error_code=code, error_message=NOT_AUTHORIZED)
        return await (then or anyone)(access, header, request, handle)
    return rule


async def anyone(access, header, request, handle):
    """No permission needed."""
    return await handle(request)


def group(operation: Op, then: Rule | None = None) -> Rule:
    """The request's group needs ``operation``; then ``then``."""
    return needs(lambda a, r: a.group(operation, r.group_id), GROUP_DENIED, then)


def group_check(operation: Op) -> Check:
    """For the APIs whose request lists group ids."""
    return lambda access, group_id: None if access.group(operation, group_id) else GROUP_DENIED


def cluster(operation: Op) -> Rule:
    """Needs ``operation`` on the cluster; the response's one error code says no."""
    return needs(lambda a, r: a.cluster(operation), CLUSTER_DENIED)


def cluster_check(operation: Op) -> Check:
    return lambda access, entry: None if access.cluster(operation) else CLUSTER_DENIED


def group_read(access, request) -> ErrorCode | None:
    return None if access.group(Op.READ, request.group_id) else GROUP_DENIED


def transaction_check(access, request) -> ErrorCode | None:
    """WRITE on the request's transactional id."""
    return None if access.transactional_id(Op.WRITE, request.transactional_id) else TRANSACTIONAL_ID_DENIED


def transactional_group(access, request) -> ErrorCode | None:
    return transaction_check(access, request) or group_read(access, request)


def transaction(check: Check = transaction_check) -> Rule:
    """The whole request needs ``check`` (the transactional id's WRITE by default); its one error code says no."""
    async def rule(access, header, request, handle):
        code = check(access, request)
        return await handle(request) if code is None else empty_response(header, error_code=code)
    return rule


def topic_results(check: Check, field: str, answers: str, result: type, name_of=lambda t: t.name) -> Rule:
    """APIs with one ``result`` per topic (name, error code, message)."""
    return per_resource(field, check, answers, lambda t, code: result(
        name=name_of(t), error_code=code, error_message=NOT_AUTHORIZED))


def partition_results(check: Check, topic_result: type, partition_result: type, answers: str = "topics",
                      name: str = "name", index: str = "partition_index",
                      indexes_of=lambda t: [p.partition_index for p in t.partitions], **fields) -> Rule:
    """APIs with one result per partition of each topic, each with its error code."""
    return per_resource("topics", check, answers, lambda t, code: topic_result(
        **{name: getattr(t, name)}, partitions=partition_answers(partition_result, index, indexes_of(t),
                                                                 error_code=code, **fields)))


def committed(topic_result: type, partition_result: type, whole: Check) -> Rule:
    """Offsets (OffsetCommit, TxnOffsetCommit, OffsetDelete): each topic needs READ; if ``whole`` says
    no to the request (its group, its transactional id), every partition is answered with that error."""
    async def rule(access, header, request, handle):
        denied = whole(access, request)
        check = (lambda a, t: denied) if denied is not None else topic_check(Op.READ)
        return await partition_results(check, topic_result, partition_result)(access, header, request, handle)
    return rule


def group_heartbeat(topic_operation: Op) -> Rule:
    """Share and consumer group heartbeats: READ on the group, ``topic_operation`` on every topic
    it subscribes to (READ for share groups, DESCRIBE for consumer groups, as Kafka)."""
    async def rule(access, header, request, handle):
        if not access.group(Op.READ, request.group_id):
            return empty_response(header, error_code=GROUP_DENIED, error_message=NOT_AUTHORIZED)
        if not all(access.topic(topic_operation, name) for name in request.subscribed_topic_names or ()):
            return empty_response(header, error_code=TOPIC_DENIED, error_message=NOT_AUTHORIZED)
        return await handle(request)
    return rule


def described_groups(described_group: type) -> Rule:
    """Consumer and share group Describe: DESCRIBE on each group id, each denied one answered as ``described_group``."""
    return per_resource("group_ids", group_check(Op.DESCRIBE), "groups", lambda group_id, code: described_group(
        error_code=code, error_message=NOT_AUTHORIZED, group_id=group_id, members=[]))
