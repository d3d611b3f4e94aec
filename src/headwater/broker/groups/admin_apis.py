"""DescribeGroups, ListGroups, DeleteGroups: the operator's view of groups."""
from __future__ import annotations

from headwater.broker.security.acl_operations import GROUP_OPERATIONS, authorized_operations
from headwater.protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import group_check, per_resource, visible

from .group import Group, GroupDescription, GroupState

DescribeGroupsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_GROUPS][1]
ListGroupsResponse = MESSAGE_CLASSES[ApiKey.LIST_GROUPS][1]
DeleteGroupsResponse = MESSAGE_CLASSES[ApiKey.DELETE_GROUPS][1]
CLASSIC, CONSUMER, SHARE = "classic", "consumer", "share"  # ListGroups v5 group types


def _described(group: GroupDescription, operations: set[int] | None):
    GroupResult = DescribeGroupsResponse.DescribedGroup
    MemberResult = GroupResult.DescribedGroupMember
    members = [MemberResult(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                            client_host=m.client_host, member_metadata=m.metadata, member_assignment=m.assignment)
               for m in group.members]
    return GroupResult(error_code=0, group_id=group.group_id, group_state=group.state.value,
                       protocol_type=group.protocol_type, protocol_data=group.protocol, members=members,
                       authorized_operations=operations)


async def describe_groups(broker, header, request):
    asked = header.api_version >= 3 and request.include_authorized_operations
    operations = authorized_operations(asked, GROUP_OPERATIONS)
    # A consumer group (KIP-848) is no classic group: Dead here, as Kafka answers before DescribeGroups v6
    return DescribeGroupsResponse(groups=[_described(
        Group(group_id, state=GroupState.DEAD).describe() if group_id in broker.consumer_groups.groups
        else broker.groups.describe(group_id), operations) for group_id in request.groups])


async def list_groups(broker, header, request):
    states = set(request.states_filter or []) if header.api_version >= 4 else set()
    types = {t.lower() for t in request.types_filter or []} if header.api_version >= 5 else set()
    ListedGroup = ListGroupsResponse.ListedGroup
    consumer_groups = broker.consumer_groups.groups
    listed = [ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state.value,
                          group_type=CLASSIC)
              for g in broker.groups.list_groups()
              if g.group_id not in consumer_groups  # there, the classic group only keeps the offsets
              and (not states or g.state.value in states) and (not types or CLASSIC in types)]
    listed += [ListedGroup(group_id=g.group_id, protocol_type=CONSUMER_PROTOCOL_TYPE, group_state=g.state.value,
                           group_type=CONSUMER)
               for g in consumer_groups.values()
               if (not states or g.state.value in states) and (not types or CONSUMER in types)]
    listed += [ListedGroup(group_id=g.group_id, protocol_type="share", group_state=g.state, group_type=SHARE)
               for g in broker.share.groups.values()
               if (not states or g.state in states) and (not types or SHARE in types)]
    return ListGroupsResponse(error_code=0, groups=listed)


async def delete_groups(broker, header, request):
    GroupResult = DeleteGroupsResponse.DeletableGroupResult
    def delete(group_id: str):
        if group_id in broker.share.groups:
            return broker.share.delete(group_id)
        if group_id in broker.consumer_groups.groups:
            error = broker.consumer_groups.delete(group_id)
            if error or broker.groups.describe(group_id).state is GroupState.DEAD:
                return error   # non-empty, or gone with no offsets ever committed
        return broker.groups.delete(group_id)
    return DeleteGroupsResponse(results=[GroupResult(group_id=group_id, error_code=delete(group_id))
                                         for group_id in request.groups_names])


list_groups_rule = visible("groups", lambda a, g: a.group(Op.DESCRIBE, g.group_id))
describe_groups_rule = per_resource("groups", group_check(Op.DESCRIBE), "groups", lambda g, code: (
    DescribeGroupsResponse.DescribedGroup(error_code=code, group_id=g)))
delete_groups_rule = per_resource("groups_names", group_check(Op.DELETE), "results", lambda g, code: (
    DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code)))
