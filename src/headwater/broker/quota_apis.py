"""DescribeClientQuotas and AlterClientQuotas: the quotas admin clients read and set (client-id entities)."""
from __future__ import annotations

import logging

from headwater.broker.quotas import QuotaError
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import MESSAGE_CLASSES, ApiKey
from headwater.protocol.quota_names import CLIENT_ID
from headwater.broker.security.acl_operations import AclOperation as Op
from headwater.broker.security.authorization import NOT_AUTHORIZED, cluster_check, per_resource

log = logging.getLogger("headwater.broker")

DescribeClientQuotasResponse = MESSAGE_CLASSES[ApiKey.DESCRIBE_CLIENT_QUOTAS][1]
AlterClientQuotasResponse = MESSAGE_CLASSES[ApiKey.ALTER_CLIENT_QUOTAS][1]
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2  # DescribeClientQuotas filter match types


async def describe_client_quotas(broker, header, request):
    Entry = DescribeClientQuotasResponse.EntryData

    def matches(entity) -> bool:
        for component in request.components:
            if component.entity_type != CLIENT_ID:
                return False  # no user entities here: nothing matches a filter on them
            if component.match_type == MATCH_EXACT and entity != component.match:
                return False
            if component.match_type == MATCH_DEFAULT and entity is not None:
                return False
            if component.match_type == MATCH_ANY and entity is None:
                return False
        return True
    entries = [Entry(entity=[Entry.EntityData(entity_type=CLIENT_ID, entity_name=entity)],
                     values=[Entry.ValueData(key=k, value=v) for k, v in sorted(quotas.items())])
               for entity, quotas in broker.quotas.configs.items() if matches(entity)]
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=ErrorCode.NONE, error_message=None,
                                        entries=entries)


async def alter_client_quotas(broker, header, request):
    Entry = AlterClientQuotasResponse.EntryData
    results = []
    for entry in request.entries:
        error, message = ErrorCode.NONE, None
        types = [e.entity_type for e in entry.entity]
        if types != [CLIENT_ID]:
            error, message = ErrorCode.INVALID_REQUEST, f"only {CLIENT_ID} quotas are supported, not {types}"
        else:
            entity = entry.entity[0].entity_name
            changes = {op.key: None if op.remove else op.value for op in entry.ops}
            try:
                if request.validate_only:
                    for key, value in changes.items():
                        broker.quotas.validate(key, value)
                else:
                    broker.quotas.alter(entity, changes)
                    log.info("quotas of client-id %r set: %s", entity or "<default>",
                             ", ".join(f"{key}={'none' if value is None else value}" for key, value in changes.items()))
            except QuotaError as exc:
                error, message = ErrorCode.INVALID_REQUEST, str(exc)
        results.append(Entry(error_code=error, error_message=message,
                             entity=[Entry.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
                                     for e in entry.entity]))
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)


alter_client_quotas_rule = per_resource("entries", cluster_check(Op.ALTER_CONFIGS), "entries", lambda e, code: (
    AlterClientQuotasResponse.EntryData(error_code=code, error_message=NOT_AUTHORIZED, entity=[
        AlterClientQuotasResponse.EntryData.EntityData(entity_type=x.entity_type, entity_name=x.entity_name)
        for x in e.entity])))
