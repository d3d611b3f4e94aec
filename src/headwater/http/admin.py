"""The console's admin actions as the Kafka requests an admin client would send.

Creating a topic, editing its configs, deleting records, ACLs and SCRAM users: each action is
built as its Kafka request (CreateTopics, IncrementalAlterConfigs, DeleteRecords, Create/
Describe/DeleteAcls, Describe/AlterUserScramCredentials) and answered by the broker's own
handler behind its own authorization rule (its row of ``broker.apis.ENDPOINTS``), with the console's
logged-in user as the principal. So the console validates, refuses and errs exactly as the
Kafka APIs do, and an operator sees the same error a client would get.
"""
from __future__ import annotations

import functools
import hashlib
import secrets
from dataclasses import dataclass

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.apis import ENDPOINTS
from headwater.broker.broker import Broker
from headwater.broker.security import authorization
from headwater.broker.security.acls import AclBinding, PatternType, ResourceType
from headwater.broker.security.connection import ANONYMOUS
from headwater.broker.security.listeners import Listener, SecurityProtocol
from headwater.broker.security.user_apis import CODE_OF
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, RequestHeader

CLIENT_ID = "headwater-console"
SET, DELETE = 0, 1        # IncrementalAlterConfigs operations
TOPIC_RESOURCE = 2        # DescribeConfigs/AlterConfigs resource type of a topic
USER_ITERATIONS = 8192    # SCRAM iterations of users created in the console (Kafka accepts 4096..16384)


class Refused(Exception):
    """The broker's answer was an error: its Kafka error code and message."""

    def __init__(self, error: int, message: str | None):
        self.name = ErrorCode(error).name if error in ErrorCode._value2member_map_ else f"error {error}"
        super().__init__(f"{self.name}: {message or 'refused'}")

    @property
    def denied(self) -> bool:
        return self.name.endswith("_AUTHORIZATION_FAILED")


@dataclass(frozen=True)
class ConsoleConnection:
    """What authorization asks of a connection, for a console user (``authorization.Access``'s conn)."""
    listener: Listener
    peer: str
    principal: str


class Admin:
    """The actions of one console request, as its user."""

    def __init__(self, broker: Broker, user: str | None, peer: str):
        self.broker = broker
        # An open console (no SASL listener) acts as the anonymous user of a plaintext listener, as
        # a client of that broker would; a secured one as the logged-in user of a SASL listener.
        protocol = SecurityProtocol.SASL_PLAINTEXT if user is not None else SecurityProtocol.PLAINTEXT
        conn = ConsoleConnection(Listener(protocol, "", 0), peer, f"User:{user}" if user is not None else ANONYMOUS)
        self.access = authorization.Access(broker.authorizer, conn, broker.config.allow_everyone_if_no_acl_found)

    async def _call(self, key: ApiKey, **fields):
        endpoint = ENDPOINTS[key]
        version = endpoint.api.max_version
        header = RequestHeader(key, version, 0, CLIENT_ID)
        request = endpoint.api.request(**fields)
        handle = functools.partial(endpoint.handle, self.broker, header)
        return await endpoint.authorize(self.access, header, request, handle)

    def may(self, operation: AclOperation, resource: ResourceType, name: str) -> bool:
        return self.access.may(operation, resource, name)

    # --- topics ---------------------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, configs: dict[str, str]) -> None:
        Topic = ENDPOINTS[ApiKey.CREATE_TOPICS].api.request.CreatableTopic
        response = await self._call(ApiKey.CREATE_TOPICS, validate_only=False, timeout_ms=30_000, topics=[Topic(
            name=name, num_partitions=partitions, replication_factor=-1, assignments=[],
            configs=[Topic.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])])
        _check(response.topics[0])

    async def alter_topic_configs(self, topic: str, set_: dict[str, str], delete: list[str]) -> None:
        Resource = ENDPOINTS[ApiKey.INCREMENTAL_ALTER_CONFIGS].api.request.AlterConfigsResource
        Config = Resource.AlterableConfig
        configs = [Config(name=k, config_operation=SET, value=v) for k, v in set_.items()]
        configs += [Config(name=k, config_operation=DELETE, value=None) for k in delete]
        response = await self._call(ApiKey.INCREMENTAL_ALTER_CONFIGS, validate_only=False, resources=[Resource(
            resource_type=TOPIC_RESOURCE, resource_name=topic, configs=configs)])
        _check(response.responses[0])

    async def delete_records(self, topic: str, partition: int, before: int) -> int:
        """Move the partition's log start to ``before``; returns the new low watermark."""
        Topic = ENDPOINTS[ApiKey.DELETE_RECORDS].api.request.DeleteRecordsTopic
        response = await self._call(ApiKey.DELETE_RECORDS, timeout_ms=30_000, topics=[Topic(
            name=topic, partitions=[Topic.DeleteRecordsPartition(partition_index=partition, offset=before)])])
        result = response.topics[0].partitions[0]
        _check(result)
        return result.low_watermark

    # --- consumer groups ------------------------------------------------------------------------

    async def commit_offsets(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        """Commit ``offsets`` (partition -> offset) for an empty group, as a reset by an admin client
        does (generation -1, no member): READ on the group and on the topic, as for any commit."""
        Topic = ENDPOINTS[ApiKey.OFFSET_COMMIT].api.request.OffsetCommitRequestTopic
        response = await self._call(
            ApiKey.OFFSET_COMMIT, group_id=group, generation_id_or_member_epoch=-1, member_id="",
            group_instance_id=None, retention_time_ms=-1, topics=[Topic(name=topic, partitions=[
                Topic.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_leader_epoch=-1,
                                                   committed_metadata="") for p, o in sorted(offsets.items())])])
        for result in response.topics[0].partitions:
            _check(result)

    # --- ACLs -----------------------------------------------------------------------------------

    async def acls(self) -> list[AclBinding]:
        response = await self._call(ApiKey.DESCRIBE_ACLS, resource_type_filter=ResourceType.ANY,
                                    resource_name_filter=None, pattern_type_filter=PatternType.ANY,
                                    principal_filter=None, host_filter=None, operation=1, permission_type=1)
        _check(response)
        return [AclBinding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
                           a.permission_type) for r in response.resources for a in r.acls]

    async def create_acl(self, acl: AclBinding) -> None:
        Creation = ENDPOINTS[ApiKey.CREATE_ACLS].api.request.AclCreation
        response = await self._call(ApiKey.CREATE_ACLS, creations=[Creation(
            resource_type=acl.resource_type, resource_name=acl.resource_name, resource_pattern_type=acl.pattern_type,
            principal=acl.principal, host=acl.host, operation=acl.operation, permission_type=acl.permission)])
        _check(response.results[0])

    async def delete_acl(self, acl: AclBinding) -> int:
        """Delete exactly this ACL; returns how many were deleted (0 or 1)."""
        Filter = ENDPOINTS[ApiKey.DELETE_ACLS].api.request.DeleteAclsFilter
        response = await self._call(ApiKey.DELETE_ACLS, filters=[Filter(
            resource_type_filter=acl.resource_type, resource_name_filter=acl.resource_name,
            pattern_type_filter=acl.pattern_type, principal_filter=acl.principal, host_filter=acl.host,
            operation=acl.operation, permission_type=acl.permission)])
        result = response.filter_results[0]
        _check(result)
        return len(result.matching_acls)

    # --- SCRAM users ----------------------------------------------------------------------------

    async def users(self) -> dict[str, list[tuple[str, int]]]:
        """user -> [(mechanism, iterations)]"""
        response = await self._call(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, users=None)
        _check(response)
        names = {code: name for name, code in CODE_OF.items()}
        return {r.user: [(names[c.mechanism], c.iterations) for c in r.credential_infos]
                for r in sorted(response.results, key=lambda r: r.user)}

    async def create_user(self, user: str, password: str, mechanism: str) -> None:
        """Salt and hash the password as an admin client does (RFC 5802's SaltedPassword), then upsert."""
        if mechanism not in CODE_OF:
            raise Refused(ErrorCode.INVALID_REQUEST, f"mechanism {mechanism!r}: one of {', '.join(CODE_OF)}")
        salt = secrets.token_bytes(32)
        digest = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, USER_ITERATIONS)
        Upsertion = ENDPOINTS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS].api.request.ScramCredentialUpsertion
        response = await self._call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=[], upsertions=[Upsertion(
            name=user, mechanism=CODE_OF[mechanism], iterations=USER_ITERATIONS, salt=salt, salted_password=salted)])
        _check(response.results[0])

    async def delete_user(self, user: str) -> None:
        """Delete every SCRAM credential of the user."""
        mechanisms = [m for m, _ in (await self.users()).get(user, [])] or list(CODE_OF)
        Deletion = ENDPOINTS[ApiKey.ALTER_USER_SCRAM_CREDENTIALS].api.request.ScramCredentialDeletion
        response = await self._call(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, upsertions=[], deletions=[
            Deletion(name=user, mechanism=CODE_OF[m]) for m in mechanisms])
        errors = [r for r in response.results if r.error_code]
        if len(errors) == len(response.results):   # a user without some mechanism is no error
            _check(errors[0])


def _check(result) -> None:
    if result.error_code:
        raise Refused(result.error_code, getattr(result, "error_message", None))
