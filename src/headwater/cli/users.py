"""`headwater users create|list|delete`: the SASL users in a broker's data directory.

Only salted, iterated SCRAM keys are stored; a running broker picks changes up at its next
authentication.
"""
from __future__ import annotations

import getpass
import os
from pathlib import Path

from headwater.broker.security.credentials import DEFAULT_ITERATIONS, MECHANISMS, CredentialStore, make_credential
from headwater.cli.common import CommandError, emit


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("users", help="manage the SASL users (PLAIN, SCRAM-SHA-256/512) of a broker")
    actions = p.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a user, or set its password")
    create.add_argument("name")
    create.add_argument("--password", help="the password (default: $HEADWATER_PASSWORD, else asked for)")
    create.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help="SCRAM iterations, at least 4096 (default %(default)s)")
    create.set_defaults(func=_create)
    listing = actions.add_parser("list", help="list users and their mechanisms")
    listing.add_argument("--json", action="store_true", help="print JSON for scripts instead of a table")
    listing.set_defaults(func=_list)
    delete = actions.add_parser("delete", help="delete a user")
    delete.add_argument("name")
    delete.set_defaults(func=_delete)
    for action in (create, listing, delete):
        action.add_argument("--data-dir", required=True, type=Path, help="the broker's data directory")


def _create(args) -> int:
    password = args.password or os.environ.get("HEADWATER_PASSWORD") or getpass.getpass(f"password for {args.name}: ")
    if not password:
        raise CommandError("the password is empty")
    if args.iterations < 4096:
        raise CommandError(f"--iterations {args.iterations}: SCRAM needs at least 4096")
    store = CredentialStore(args.data_dir)
    for mechanism in MECHANISMS:
        store.set(args.name, mechanism, make_credential(mechanism, password, args.iterations))
    print(f"user {args.name} can authenticate with PLAIN, {', '.join(MECHANISMS)}")
    return 0


def _list(args) -> int:
    users = CredentialStore(args.data_dir).users()
    emit(args, [{"user": user, "mechanisms": ",".join(mechs)} for user, mechs in users.items()], title="users")
    return 0


def _delete(args) -> int:
    if not CredentialStore(args.data_dir).delete(args.name):
        raise CommandError(f"no user {args.name!r} in {args.data_dir}")
    print(f"user {args.name} deleted")
    return 0
