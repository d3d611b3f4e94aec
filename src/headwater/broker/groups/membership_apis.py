"""FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup: being a member of a group."""
from __future__ import annotations

from headwater.broker.endpoint import client_host
from headwater.broker.security import connection
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import GROUP_KEY, TRANSACTION_KEY, ApiKey, MESSAGE_CLASSES
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.acls import ResourceType
from headwater.broker.security.authorization import GROUP_DENIED, TRANSACTIONAL_ID_DENIED, empty_response

from .coordinator import JoinRequest

FindCoordinatorResponse = MESSAGE_CLASSES[ApiKey.FIND_COORDINATOR][1]
JoinGroupResponse = MESSAGE_CLASSES[ApiKey.JOIN_GROUP][1]
SyncGroupResponse = MESSAGE_CLASSES[ApiKey.SYNC_GROUP][1]
HeartbeatResponse = MESSAGE_CLASSES[ApiKey.HEARTBEAT][1]
LeaveGroupResponse = MESSAGE_CLASSES[ApiKey.LEAVE_GROUP][1]


async def find_coordinator(broker, header, request):
    # One broker: it coordinates every group and every transactional id.
    if request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
        return FindCoordinatorResponse(error_code=ErrorCode.INVALID_REQUEST,
                                       error_message=f"unknown coordinator key type {request.key_type}",
                                       node_id=-1, host="", port=-1)
    if not request.key:
        error = ErrorCode.INVALID_GROUP_ID if request.key_type == GROUP_KEY else ErrorCode.INVALID_REQUEST
        return FindCoordinatorResponse(error_code=error, error_message="empty coordinator key",
                                       node_id=-1, host="", port=-1)
    host, port = connection.advertised(broker.config)
    return FindCoordinatorResponse(error_code=0, error_message=None, node_id=broker.config.node_id, host=host,
                                   port=port)


async def join_group(broker, header, request):
    # One group id, one kind of group; an empty consumer group (KIP-848) gives its id up, as Kafka converts it.
    consumer_group_live = broker.consumer_groups.delete(request.group_id) == ErrorCode.NON_EMPTY_GROUP
    if request.group_id in broker.share.groups or consumer_group_live:
        return JoinGroupResponse(error_code=ErrorCode.INCONSISTENT_GROUP_PROTOCOL, generation_id=-1, protocol_name="",
                                 leader="", member_id=request.member_id, members=[])
    rebalance_timeout = request.rebalance_timeout_ms if header.api_version >= 1 else request.session_timeout_ms
    result = await broker.groups.join(JoinRequest(
        group_id=request.group_id, member_id=request.member_id, instance_id=request.group_instance_id,
        client_id=header.client_id or "", client_host=client_host.get(),
        session_timeout_ms=request.session_timeout_ms, rebalance_timeout_ms=rebalance_timeout,
        protocol_type=request.protocol_type, protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=header.api_version >= 4))
    MemberResult = JoinGroupResponse.JoinGroupResponseMember
    members = [MemberResult(member_id=m.member_id, group_instance_id=m.instance_id,
                            metadata=m.metadata(result.protocol))
               for m in result.members]
    return JoinGroupResponse(error_code=result.error, generation_id=result.generation,
                             protocol_name=result.protocol or "", leader=result.leader, member_id=result.member_id,
                             members=members)


async def sync_group(broker, header, request):
    error, assignment = await broker.groups.sync(
        request.group_id, request.generation_id, request.member_id, request.group_instance_id,
        [(a.member_id, bytes(a.assignment)) for a in request.assignments])
    return SyncGroupResponse(error_code=error, assignment=assignment)


async def heartbeat(broker, header, request):
    error = broker.groups.heartbeat(request.group_id, request.generation_id, request.member_id,
                                    request.group_instance_id)
    return HeartbeatResponse(error_code=error)


async def leave_group(broker, header, request):
    if header.api_version < 3:
        (error,) = broker.groups.leave(request.group_id, [(request.member_id, None)])
        return LeaveGroupResponse(error_code=error)
    leavers = [(m.member_id, m.group_instance_id) for m in request.members]
    errors = broker.groups.leave(request.group_id, leavers)
    MemberResult = LeaveGroupResponse.MemberResponse
    return LeaveGroupResponse(error_code=0, members=[
        MemberResult(member_id=member_id, group_instance_id=instance_id, error_code=error)
        for (member_id, instance_id), error in zip(leavers, errors)])


async def find_coordinator_rule(access, header, request, handle):
    """DESCRIBE on the group or transactional id whose coordinator is asked for."""
    key_type = getattr(request, "key_type", GROUP_KEY)
    resource, code = ((ResourceType.TRANSACTIONAL_ID, TRANSACTIONAL_ID_DENIED) if key_type == TRANSACTION_KEY
                      else (ResourceType.GROUP, GROUP_DENIED))
    if access.may(Op.DESCRIBE, resource, request.key):
        return await handle(request)
    return empty_response(header, error_code=code, node_id=-1, host="", port=-1)
