"""`headwater quotas`: describe and alter client quotas (DescribeClientQuotas, AlterClientQuotas).

Neither confluent-kafka nor kafka-python's admin client offers these two APIs, so the command
sends kafka-python's generated request classes through its admin client's connection.
"""
from __future__ import annotations

import argparse

from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest

from headwater.cli.common import CommandError, add_client_args, confirm, emit, kafka_python_admin
from headwater.protocol.quota_names import CLIENT_ID, KEYS


MATCH_ANY = 2
DEFAULT_CLIENT = "<default>"  # how the default quotas (the entity without a name) are shown


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("quotas", help="client quotas: byte rates and request percentage per client id")
    sub = p.add_subparsers(dest="quotas_command", required=True)
    describe = sub.add_parser("describe", help="every client id's quotas, and the default's")
    add_client_args(describe)
    describe.set_defaults(func=describe_quotas)
    alter = sub.add_parser("alter", help="set or remove quotas of one client id (or the default)")
    who = alter.add_mutually_exclusive_group(required=True)
    who.add_argument("--client-id", help="the client.id the quotas apply to")
    who.add_argument("--default", action="store_true", help="the default for client ids without their own")
    alter.add_argument("--add", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                       help=f"set a quota ({', '.join(KEYS)}; bytes per second or percent), repeatable")
    alter.add_argument("--delete", action="append", default=[], choices=KEYS, help="remove a quota, repeatable")
    add_client_args(alter)
    alter.set_defaults(func=alter_quotas)


def _setting(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    if not sep or key not in KEYS:
        raise argparse.ArgumentTypeError(f"expected one of {', '.join(KEYS)}=NUMBER, got {text!r}")
    try:
        return key, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None


def _send(args, request):
    admin = kafka_python_admin(args, "headwater-quotas")
    try:
        return admin._manager.run(admin._manager.send, request)
    finally:
        admin.close()


def describe_quotas(args) -> int:
    Component = DescribeClientQuotasRequest.ComponentData
    response = _send(args, DescribeClientQuotasRequest(
        components=[Component(entity_type=CLIENT_ID, match_type=MATCH_ANY, match=None)], strict=False))
    if response.error_code:
        raise CommandError(response.error_message or f"error {response.error_code}")
    default = _send(args, DescribeClientQuotasRequest(
        components=[Component(entity_type=CLIENT_ID, match_type=1, match=None)], strict=False))
    rows = [{"client_id": DEFAULT_CLIENT if e.entity[0].entity_name is None else e.entity[0].entity_name,
             **{v.key: v.value for v in e.values}} for e in [*default.entries, *response.entries]]
    emit(args, [{"client_id": r["client_id"], **{k: _whole(r.get(k)) for k in KEYS}} for r in rows],
         title="client quotas")
    return 0


def _whole(value: float | None) -> int | float | None:
    """The wire carries every quota as a double: 1048576, not 1048576.0, for a whole number."""
    return int(value) if value is not None and value.is_integer() else value


def alter_quotas(args) -> int:
    if not args.add and not args.delete:
        raise CommandError("nothing to do: give --add KEY=VALUE or --delete KEY")
    Entry = AlterClientQuotasRequest.EntryData
    ops = [Entry.OpData(key=k, value=v, remove=False) for k, v in args.add]
    ops += [Entry.OpData(key=k, value=0.0, remove=True) for k in args.delete]
    entity = [Entry.EntityData(entity_type=CLIENT_ID, entity_name=None if args.default else args.client_id)]
    response = _send(args, AlterClientQuotasRequest(entries=[Entry(entity=entity, ops=ops)], validate_only=False))
    for entry in response.entries:
        if entry.error_code:
            raise CommandError(entry.error_message or f"error {entry.error_code}")
    confirm(args, f"quotas of {'the default client' if args.default else repr(args.client_id)} altered",
            [{"client_id": DEFAULT_CLIENT if args.default else args.client_id, **{k: _whole(v) for k, v in args.add},
              **{k: None for k in args.delete}}])
    return 0
