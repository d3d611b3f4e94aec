"""DescribeGroups, ListGroups, DeleteGroups: the operator's view of groups."""
from __future__ import annotations

from headwater.broker.handlers import handles
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES

from .group import GroupState

DescribeGroupsResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_GROUPS][1]
ListGroupsResponse = MESSAGE_CLASSES[ApiKey.LIST_GROUPS][1]
DeleteGroupsResponse = MESSAGE_CLASSES[ApiKey.DELETE_GROUPS][1]
CLASSIC = "classic"  # ListGroups v5 group type: the only protocol Headwater speaks


def _describe(broker, group_id: str):
    G = DescribeGroupsResponse.DescribedGroup
    M = G.DescribedGroupMember
    group = broker.groups.groups.get(group_id)
    if group is None:  # Kafka describes an unknown group as Dead, without an error
        return G(error_code=0, group_id=group_id, group_state=GroupState.DEAD.value, protocol_type="",
                 protocol_data="", members=[])
    # As Kafka: the protocol and each member's subscription and assignment only once Stable.
    stable = group.state is GroupState.STABLE
    members = [M(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                 client_host=m.client_host, member_metadata=m.metadata(group.protocol) if stable else b"",
                 member_assignment=m.assignment if stable else b"")
               for m in group.members.values()]
    return G(error_code=0, group_id=group_id, group_state=group.state.value, protocol_type=group.protocol_type or "",
             protocol_data=group.protocol if stable else "", members=members)


@handles(ApiKey.DESCRIBE_GROUPS, 0, 5)
async def describe_groups(broker, header, request):
    return DescribeGroupsResponse(groups=[_describe(broker, group_id) for group_id in request.groups])


@handles(ApiKey.LIST_GROUPS, 0, 5)
async def list_groups(broker, header, request):
    states = set(request.states_filter or []) if header.api_version >= 4 else set()
    types = {t.lower() for t in request.types_filter or []} if header.api_version >= 5 else set()
    L = ListGroupsResponse.ListedGroup
    listed = [L(group_id=g.group_id, protocol_type=g.protocol_type or "", group_state=g.state.value,
                group_type=CLASSIC)
              for g in broker.groups.groups.values()
              if (not states or g.state.value in states) and (not types or CLASSIC in types)]
    return ListGroupsResponse(error_code=0, groups=listed)


@handles(ApiKey.DELETE_GROUPS, 0, 2)
async def delete_groups(broker, header, request):
    R = DeleteGroupsResponse.DeletableGroupResult
    return DeleteGroupsResponse(results=[R(group_id=group_id, error_code=broker.groups.delete(group_id))
                                         for group_id in request.groups_names])
