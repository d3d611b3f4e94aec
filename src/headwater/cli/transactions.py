"""`headwater transactions`: the transactional ids a broker coordinates and what each has open.

Through kafka-python's admin client (ListTransactions, DescribeTransactions), so the command
works against a Kafka cluster as well as Headwater.
"""
from __future__ import annotations

import time

from kafka.admin import KafkaAdminClient
from kafka.errors import KafkaError, TransactionalIdNotFoundError

from headwater.cli.common import CommandError, add_client_args, emit, kafka_python_admin


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("transactions", help="transactional producers: state, open partitions, age")
    sub = p.add_subparsers(dest="transactions_command", required=True)
    for name, what, func, takes_id in (
            ("list", "every transactional id, with its producer id/epoch, state and age", list_transactions, False),
            ("describe", "one transactional id: state, partitions of its open transaction", describe_transaction,
             True)):
        command = sub.add_parser(name, help=what)
        if takes_id:
            command.add_argument("transactional_id")
        add_client_args(command)
        command.set_defaults(func=func)


def _row(txn_id: str, d, now_ms: int) -> dict:
    open_ = d.transaction_start_time_ms >= 0 and d.state.value in ("Ongoing", "PrepareCommit", "PrepareAbort")
    return {"transactional_id": txn_id, "producer_id": d.producer_id, "producer_epoch": d.producer_epoch,
            "state": d.state.value, "timeout_ms": d.transaction_timeout_ms,
            "partitions": sorted(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions),
            "age_s": round((now_ms - d.transaction_start_time_ms) / 1000, 1) if open_ else None}


def _describe(admin: KafkaAdminClient, txn_ids: list[str]) -> list[dict]:
    if not txn_ids:
        return []
    try:
        described = admin.describe_transactions(txn_ids)
    except TransactionalIdNotFoundError:
        raise CommandError(f"no transactional id {', '.join(txn_ids)} is known to the coordinator") from None
    except KafkaError as exc:
        raise CommandError(f"cannot describe {', '.join(txn_ids)}: {type(exc).__name__}") from None
    now = int(time.time() * 1000)
    return [_row(txn_id, described[txn_id], now) for txn_id in sorted(described)]


def list_transactions(args) -> int:
    admin = kafka_python_admin(args)
    try:
        listed = [t.transactional_id for ts in admin.list_transactions().values() for t in ts]
        emit(args, _describe(admin, listed), title="transactions")
    finally:
        admin.close()
    return 0


def describe_transaction(args) -> int:
    admin = kafka_python_admin(args)
    try:
        emit(args, _describe(admin, [args.transactional_id]), title=f"transaction {args.transactional_id}")
    finally:
        admin.close()
    return 0
