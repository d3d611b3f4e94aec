"""The authorizer's rules in-process, each against the answer written out by hand."""
from __future__ import annotations

import pytest

from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.acls import (OPERATION_ALL, AclBinding, AclFilter, AclStore, Authorizer, PatternType,
                                           Permission, ResourceType)

TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(name, op, permission=ALLOW, pattern=PatternType.LITERAL, principal="User:ann", host="*", kind=TOPIC):
    return AclBinding(kind, name, pattern, principal, host, op, permission)


@pytest.fixture
def authorizer(tmp_path):
    store = AclStore(tmp_path)
    store.add([acl("orders", Op.READ), acl("pay-", OPERATION_ALL, pattern=PatternType.PREFIXED),
               acl("pay-secret", Op.WRITE, DENY), acl("*", Op.DESCRIBE, principal="User:*", kind=GROUP),
               acl("audit", Op.WRITE, host="10.0.0.9")])
    return Authorizer(store, frozenset({"User:root"}))


@pytest.mark.parametrize("principal, host, op, kind, name, allowed", [
    ("User:ann", "1.2.3.4", Op.READ, TOPIC, "orders", True),
    ("User:ann", "1.2.3.4", Op.WRITE, TOPIC, "orders", False),        # READ only
    ("User:ann", "1.2.3.4", Op.DESCRIBE, TOPIC, "orders", True),      # implied by READ
    ("User:bob", "1.2.3.4", Op.READ, TOPIC, "orders", False),         # another principal
    ("User:ann", "1.2.3.4", Op.WRITE, TOPIC, "pay-in", True),         # prefixed ALL
    ("User:ann", "1.2.3.4", Op.WRITE, TOPIC, "pay-secret", False),    # deny wins over the prefixed allow
    ("User:ann", "1.2.3.4", Op.READ, TOPIC, "pay-secret", True),      # the deny is for WRITE only
    ("User:ann", "1.2.3.4", Op.WRITE, TOPIC, "payroll", False),       # "pay" is not the prefix "pay-"
    ("User:ann", "1.2.3.4", Op.WRITE, TOPIC, "audit", False),         # only from 10.0.0.9
    ("User:ann", "10.0.0.9", Op.WRITE, TOPIC, "audit", True),
    ("User:eve", "1.2.3.4", Op.DESCRIBE, GROUP, "any-group", True),   # User:* and the * resource
    ("User:eve", "1.2.3.4", Op.READ, GROUP, "any-group", False),
    ("User:root", "1.2.3.4", Op.WRITE, TOPIC, "pay-secret", True),    # super user
    ("User:ann", "1.2.3.4", Op.READ, TOPIC, "nobody-named-it", False),  # no ACL: closed by default
])
def test_authorize(authorizer, principal, host, op, kind, name, allowed):
    assert authorizer.authorize(principal, host, op, kind, name, allow_if_no_acl=False) is allowed


def test_allow_everyone_if_no_acl_found_opens_only_unnamed_resources(authorizer):
    assert authorizer.authorize("User:bob", "h", Op.WRITE, TOPIC, "fresh", allow_if_no_acl=True)
    assert not authorizer.authorize("User:bob", "h", Op.WRITE, TOPIC, "orders", allow_if_no_acl=True)


def test_filters_and_removal(authorizer):
    store = authorizer.store
    assert len([a for a in store.acls() if AclFilter(TOPIC, "pay-secret", PatternType.MATCH).matches(a)]) == 2
    assert store.remove(AclFilter(TOPIC, permission=DENY)) == [acl("pay-secret", Op.WRITE, DENY)]
    assert authorizer.authorize("User:ann", "h", Op.WRITE, TOPIC, "pay-secret", allow_if_no_acl=False)
    store.add([acl("orders", Op.READ)])  # already there: not doubled
    assert len(store.acls()) == 4
