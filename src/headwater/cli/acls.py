"""`headwater acls add|list|remove`: a broker's ACLs, over the wire as Kafka's kafka-acls tool does
(CreateAcls, DescribeAcls, DeleteAcls through confluent-kafka's AdminClient, so it works against
Kafka too), or with --offline in a stopped broker's data directory (a running broker re-reads
the file). Names and values as kafka-acls has them."""
from __future__ import annotations

from confluent_kafka import admin as wire
from confluent_kafka.admin import AdminClient

from headwater.broker.security.acl_operations import AclOperation
from headwater.broker.security.acls import (CLUSTER_NAME, OPERATION_ALL, OPERATION_ANY, AclBinding, AclFilter,
                                           AclStore, PatternType, Permission, ResourceType)
from headwater.cli.common import CommandError, add_client_args, admin_result, client_config, confirm, emit
from headwater.cli.offline import add_offline_args, edits, offline_dir

OPERATIONS = {"ALL": OPERATION_ALL, **{op.name: int(op) for op in AclOperation}}
# kafka-acls' CLUSTER resource is librdkafka's BROKER (resource type 4 on the wire)
WIRE_RESOURCE_NAMES = {"CLUSTER": "BROKER"}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("acls", help="manage the ACLs of a broker (who may do what to which resource)")
    actions = p.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="allow (or --deny) operations to a principal")
    listing = actions.add_parser("list", help="list ACLs (all, or those matching the options)")
    remove = actions.add_parser("remove", help="remove the ACLs matching the options")
    for action, required in ((add, True), (listing, False), (remove, False)):
        action.add_argument("--principal", required=required, help="User:NAME, or User:* for everyone")
        action.add_argument("--host", default="*" if required else None, help="client address (default any)")
        action.add_argument("--operation", action="append", choices=sorted(OPERATIONS), required=required,
                            help="repeatable")
        action.add_argument("--deny", action="store_true", help="a DENY ACL (deny wins over allow)")
        action.add_argument("--prefixed", action="store_true", help="the name is a prefix (PREFIXED pattern)")
        resource = action.add_mutually_exclusive_group(required=required)
        resource.add_argument("--topic")
        resource.add_argument("--group")
        resource.add_argument("--transactional-id")
        resource.add_argument("--cluster", action="store_true")
        add_client_args(action)
        add_offline_args(action, "ACLs")
    add.set_defaults(func=edits(_add))
    listing.set_defaults(func=edits(_list))
    remove.set_defaults(func=edits(_remove))


def _resource(args) -> tuple[str, str | None]:
    """(kafka-acls' resource type name, resource name) the options name."""
    for kind, name in (("TOPIC", args.topic), ("GROUP", args.group), ("TRANSACTIONAL_ID", args.transactional_id)):
        if name is not None:
            return kind, name
    return ("CLUSTER", CLUSTER_NAME) if args.cluster else ("ANY", None)


def _pattern(args, name: str | None) -> str:
    return "PREFIXED" if args.prefixed else ("LITERAL" if name else "ANY")


def _row(resource: str, name: str, pattern: str, principal: str, host: str, operation: str, permission: str) -> dict:
    return {"resource": resource, "name": name, "pattern": pattern, "principal": principal, "host": host,
            "operation": operation, "permission": permission}


def _add(args) -> int:
    if ":" not in args.principal:
        raise CommandError(f"--principal {args.principal!r}: expected TYPE:NAME, e.g. User:alice")
    kind, name = _resource(args)
    permission = "DENY" if args.deny else "ALLOW"
    directory = offline_dir(args)
    if directory is not None:
        AclStore(directory).add([AclBinding(ResourceType[kind], name, PatternType[_pattern(args, name)],
                                            args.principal, args.host, OPERATIONS[op], Permission[permission])
                                 for op in args.operation])
    else:
        bindings = [wire.AclBinding(_wire_resource(kind), name, wire.ResourcePatternType[_pattern(args, name)],
                                    args.principal, args.host, wire.AclOperation[op],
                                    wire.AclPermissionType[permission])
                    for op in args.operation]
        admin = AdminClient(client_config(args))
        for future in admin.create_acls(bindings).values():
            admin_result(admin, future)
    confirm(args, f"added {len(args.operation)} ACL(s) for {args.principal}",
            [_row(kind, name, _pattern(args, name), args.principal, args.host, op, permission)
             for op in args.operation])
    return 0


def _list(args) -> int:
    directory = offline_dir(args)
    if directory is not None:
        found = [_stored_row(a) for a in AclStore(directory).acls() if any(f.matches(a) for f in _filters(args))]
    else:
        admin = AdminClient(client_config(args))
        found = [_wire_row(b) for f in _wire_filters(args)
                 for b in admin_result(admin, admin.describe_acls(f))]
    emit(args, found, title="ACLs")
    return 0


def _remove(args) -> int:
    directory = offline_dir(args)
    if directory is not None:
        store = AclStore(directory)
        removed = [_stored_row(a) for f in _filters(args) for a in store.remove(f)]
    else:
        admin = AdminClient(client_config(args))
        removed = [_wire_row(b) for future in admin.delete_acls(_wire_filters(args)).values()
                   for b in admin_result(admin, future)]
    confirm(args, f"removed {len(removed)} ACL(s)", removed)
    return 0


# --- offline: the data directory's ACL file ---------------------------------------------------

def _filters(args) -> list[AclFilter]:
    kind, name = _resource(args)
    permission = Permission.DENY if args.deny else Permission.ANY
    return [AclFilter(ResourceType[kind], name, PatternType[_pattern(args, name)], args.principal, args.host,
                      OPERATIONS[op] if op else OPERATION_ANY, permission) for op in (args.operation or [None])]


def _stored_row(a: AclBinding) -> dict:
    operation = "ALL" if a.operation == OPERATION_ALL else AclOperation(a.operation).name
    return _row(ResourceType(a.resource_type).name, a.resource_name, PatternType(a.pattern_type).name, a.principal,
                a.host, operation, Permission(a.permission).name)


# --- over the wire ------------------------------------------------------------------------------

def _wire_resource(kind: str) -> wire.ResourceType:
    return wire.ResourceType[WIRE_RESOURCE_NAMES.get(kind, kind)]


def _wire_filters(args) -> list[wire.AclBindingFilter]:
    kind, name = _resource(args)
    permission = "DENY" if args.deny else "ANY"
    return [wire.AclBindingFilter(_wire_resource(kind), name, wire.ResourcePatternType[_pattern(args, name)],
                                  args.principal, args.host, wire.AclOperation[op or "ANY"],
                                  wire.AclPermissionType[permission]) for op in (args.operation or [None])]


def _wire_row(b: wire.AclBinding) -> dict:
    kind = {wire_name: name for name, wire_name in WIRE_RESOURCE_NAMES.items()}.get(b.restype.name, b.restype.name)
    return _row(kind, b.name, b.resource_pattern_type.name, b.principal, b.host, b.operation.name,
                b.permission_type.name)
