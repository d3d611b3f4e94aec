"""CreateAcls (30), DescribeAcls (29), DeleteAcls (31): the ACL store over the wire, as admin clients use it."""
from __future__ import annotations

from itertools import groupby

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.security.acls import (OPERATION_ALL, AclBinding, AclFilter, PatternType, Permission,
                                           ResourceType)
from headwater.protocol.errors import ErrorCode
from headwater.broker.security.authorization import NOT_AUTHORIZED, Rule, cluster_check, per_resource

VALID_OPERATIONS = {OPERATION_ALL, *map(int, AclOperation)}


def _binding_error(b: AclBinding) -> str | None:
    if b.resource_type not in (ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER,
                               ResourceType.TRANSACTIONAL_ID):
        return f"resource type {b.resource_type} is not one an ACL can name"
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {b.pattern_type}: LITERAL or PREFIXED"
    if b.operation not in VALID_OPERATIONS or b.permission not in (Permission.ALLOW, Permission.DENY):
        return "unknown operation or permission type"
    if not b.resource_name or ":" not in b.principal or not b.host:
        return "an ACL needs a resource name, a principal TYPE:NAME and a host"
    return None


def _filter(f) -> AclFilter:
    return AclFilter(f.resource_type_filter, f.resource_name_filter, getattr(f, "pattern_type_filter", PatternType.LITERAL),
                     f.principal_filter, f.host_filter, f.operation, f.permission_type)


async def create_acls(broker, header, request):
    results, valid = [], []
    for c in request.creations:
        binding = AclBinding(c.resource_type, c.resource_name, getattr(c, "resource_pattern_type", PatternType.LITERAL),
                             c.principal, c.host, c.operation, c.permission_type)
        error = _binding_error(binding)
        if error is None:
            valid.append(binding)
        results.append(CreateAclsResponse.AclCreationResult(
            error_code=ErrorCode.INVALID_REQUEST if error else 0, error_message=error))
    broker.authorizer.store.add(valid)
    return CreateAclsResponse(throttle_time_ms=0, results=results)


def _described(acls: list[AclBinding]):
    Resource = DescribeAclsResponse.DescribeAclsResource
    key = lambda a: (a.resource_type, a.resource_name, a.pattern_type)
    return [Resource(resource_type=t, resource_name=n, pattern_type=p, acls=[
        Resource.AclDescription(principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission)
        for a in group]) for (t, n, p), group in groupby(sorted(acls, key=key), key=key)]


async def describe_acls(broker, header, request):
    matched = [a for a in broker.authorizer.store.acls() if _filter(request).matches(a)]
    return DescribeAclsResponse(throttle_time_ms=0, error_code=0, error_message=None, resources=_described(matched))


async def delete_acls(broker, header, request):
    Result = DeleteAclsResponse.DeleteAclsFilterResult
    results = []
    for f in request.filters:
        removed = broker.authorizer.store.remove(_filter(f))
        results.append(Result(error_code=0, error_message=None, matching_acls=[Result.DeleteAclsMatchingAcl(
            error_code=0, error_message=None, resource_type=a.resource_type, resource_name=a.resource_name,
            pattern_type=a.pattern_type, principal=a.principal, host=a.host, operation=a.operation,
            permission_type=a.permission) for a in removed]))
    return DeleteAclsResponse(throttle_time_ms=0, filter_results=results)


def _acl_changes_rule(field: str, answers: str, result: type, **empty) -> Rule:
    """Create/DeleteAcls: ALTER on the cluster, else each creation (filter) answered CLUSTER_AUTHORIZATION_FAILED."""
    return per_resource(field, cluster_check(AclOperation.ALTER), answers, lambda _, code: result(
        error_code=code, error_message=NOT_AUTHORIZED, **empty))


create_acls_rule = _acl_changes_rule("creations", "results", CreateAclsResponse.AclCreationResult)
delete_acls_rule = _acl_changes_rule("filters", "filter_results", DeleteAclsResponse.DeleteAclsFilterResult,
                                     matching_acls=[])
