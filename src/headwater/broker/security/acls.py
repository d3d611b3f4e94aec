"""Access control lists, as Kafka's authorizer has them: who (principal, host) may or may not do
what (operation) to which resources (type, name, literal or prefixed pattern).

Deny wins over allow; super users may do everything; a resource no ACL names is open to all
only with ``allow.everyone.if.no.acl.found`` (on for PLAINTEXT listeners, so an unsecured
broker behaves as before, off on secured ones). ACLs live in the data directory's
``acls.json`` and are re-read when ``headwater acls`` changes them.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.security.watched_file import WatchedJson

FILE_NAME = "acls.json"
WILDCARD = "*"


class ResourceType(IntEnum):
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5


class PatternType(IntEnum):
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Permission(IntEnum):
    ANY = 1
    DENY = 2
    ALLOW = 3


OPERATION_ANY, OPERATION_ALL = 1, 2
CLUSTER_NAME = "kafka-cluster"
# Kafka's implications: READ, WRITE, DELETE or ALTER allow DESCRIBE; ALTER_CONFIGS allows DESCRIBE_CONFIGS.
IMPLIED_BY = {AclOperation.DESCRIBE: {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                                      AclOperation.ALTER},
              AclOperation.DESCRIBE_CONFIGS: {AclOperation.ALTER_CONFIGS}}


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def names(self, name: str) -> bool:
        if self.pattern_type == PatternType.PREFIXED:
            return name.startswith(self.resource_name)
        return self.resource_name in (name, WILDCARD)

    def grants(self, principal: str, host: str, operation: AclOperation) -> bool:
        """Does this ACL speak about ``principal`` from ``host`` doing ``operation`` (allow or deny)?"""
        return (self.principal in (principal, "User:*") and self.host in (host, WILDCARD)
                and (self.operation in (operation, OPERATION_ALL)
                     or (self.permission == Permission.ALLOW and self.operation in IMPLIED_BY.get(operation, ()))))


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls: ANY (or None) matches every value; MATCH patterns match as the authorizer would."""
    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = OPERATION_ANY
    permission: int = Permission.ANY

    def matches(self, acl: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            name_ok = self.resource_name is None or acl.names(self.resource_name)
        else:
            name_ok = (self.pattern_type in (PatternType.ANY, acl.pattern_type)
                       and self.resource_name in (None, acl.resource_name))
        return (self.resource_type in (ResourceType.ANY, acl.resource_type) and name_ok
                and self.principal in (None, acl.principal) and self.host in (None, acl.host)
                and self.operation in (OPERATION_ANY, acl.operation)
                and self.permission in (Permission.ANY, acl.permission))


class AclStore:
    def __init__(self, data_dir: Path):
        self.file = WatchedJson(Path(data_dir) / FILE_NAME, lambda raw: [AclBinding(**a) for a in raw], [])

    def acls(self) -> list[AclBinding]:
        return self.file.load()

    def add(self, new: list[AclBinding]) -> None:
        current = self.acls()
        self._save(current + [acl for acl in dict.fromkeys(new) if acl not in current])

    def remove(self, acl_filter: AclFilter) -> list[AclBinding]:
        current = self.acls()
        removed = [acl for acl in current if acl_filter.matches(acl)]
        if removed:
            self._save([acl for acl in current if acl not in removed])
        return removed

    def _save(self, acls: list[AclBinding]) -> None:
        self.file.save([asdict(a) for a in acls])


@dataclass
class Authorizer:
    store: AclStore
    super_users: frozenset[str] = frozenset()

    def authorize(self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str, allow_if_no_acl: bool) -> bool:
        if principal in self.super_users:
            return True
        acls = [a for a in self.store.acls() if a.resource_type == resource_type and a.names(name)]
        if not acls:
            return allow_if_no_acl
        relevant = [a for a in acls if a.grants(principal, host, operation)]
        if any(a.permission == Permission.DENY for a in relevant):
            return False
        return any(a.permission == Permission.ALLOW for a in relevant)
