"""`headwater acls add|list|remove`: the ACLs in a broker's data directory (a running broker
re-reads them). Names and values as Kafka's kafka-acls tool has them."""
from __future__ import annotations

from pathlib import Path

from headwater.broker.acl_operations import AclOperation
from headwater.broker.security.acls import (CLUSTER_NAME, OPERATION_ALL, OPERATION_ANY, AclBinding, AclFilter,
                                           AclStore, PatternType, Permission, ResourceType)
from headwater.cli.common import CommandError, emit

OPERATIONS = {"ALL": OPERATION_ALL, **{op.name: int(op) for op in AclOperation}}


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("acls", help="manage the ACLs of a broker (who may do what to which resource)")
    actions = p.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="allow (or --deny) operations to a principal")
    listing = actions.add_parser("list", help="list ACLs (all, or those matching the options)")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    remove = actions.add_parser("remove", help="remove the ACLs matching the options")
    for action, required in ((add, True), (listing, False), (remove, False)):
        action.add_argument("--data-dir", required=True, type=Path, help="the broker's data directory")
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
    add.set_defaults(func=_add)
    listing.set_defaults(func=_list)
    remove.set_defaults(func=_remove)


def _resource(args) -> tuple[int, str | None]:
    for kind, name in ((ResourceType.TOPIC, args.topic), (ResourceType.GROUP, args.group),
                       (ResourceType.TRANSACTIONAL_ID, args.transactional_id)):
        if name is not None:
            return kind, name
    return (ResourceType.CLUSTER, CLUSTER_NAME) if args.cluster else (ResourceType.ANY, None)


def _add(args) -> int:
    if ":" not in args.principal:
        raise CommandError(f"--principal {args.principal!r}: expected TYPE:NAME, e.g. User:alice")
    kind, name = _resource(args)
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    permission = Permission.DENY if args.deny else Permission.ALLOW
    AclStore(args.data_dir).add([AclBinding(kind, name, pattern, args.principal, args.host, OPERATIONS[op], permission)
                                 for op in args.operation])
    print(f"added {len(args.operation)} ACL(s) for {args.principal}")
    return 0


def _filters(args) -> list[AclFilter]:
    kind, name = _resource(args)
    pattern = PatternType.PREFIXED if args.prefixed else (PatternType.LITERAL if name else PatternType.ANY)
    permission = Permission.DENY if args.deny else Permission.ANY
    return [AclFilter(kind, name, pattern, args.principal, args.host, OPERATIONS[op] if op else OPERATION_ANY,
                      permission) for op in (args.operation or [None])]


def _row(a: AclBinding) -> dict:
    operation = "ALL" if a.operation == OPERATION_ALL else AclOperation(a.operation).name
    return {"resource": ResourceType(a.resource_type).name, "name": a.resource_name,
            "pattern": PatternType(a.pattern_type).name, "principal": a.principal, "host": a.host,
            "operation": operation, "permission": Permission(a.permission).name}


def _list(args) -> int:
    acls = AclStore(args.data_dir).acls()
    emit(args, [_row(a) for a in acls if any(f.matches(a) for f in _filters(args))], title="ACLs")
    return 0


def _remove(args) -> int:
    store = AclStore(args.data_dir)
    removed = [a for f in _filters(args) for a in store.remove(f)]
    print(f"removed {len(removed)} ACL(s)")
    return 0
