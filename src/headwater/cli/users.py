"""`headwater users create|list|delete`: a broker's SASL users, over the wire as Kafka's
kafka-configs tool does (AlterUserScramCredentials, DescribeUserScramCredentials through
confluent-kafka's AdminClient), or with --offline in a broker's data directory: the way to make
the first admin user of a secured broker.

Only salted, iterated SCRAM keys are stored, one per SCRAM mechanism; a user with a key logs in
with PLAIN too. A running broker picks an offline change up at its next authentication.
"""
from __future__ import annotations

import getpass
import os

from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialDeletion,
                                   UserScramCredentialUpsertion)

from headwater.broker.security.credentials import DEFAULT_ITERATIONS, MECHANISMS, CredentialStore, make_credential
from headwater.cli.common import CommandError, add_client_args, admin_result, client_config, confirm, emit
from headwater.cli.offline import add_offline_args, edits, offline_dir

MIN_ITERATIONS = 4096  # RFC 7677's minimum, and Kafka's


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("users", help="manage the SASL users (PLAIN, SCRAM-SHA-256/512) of a broker")
    actions = p.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a user, or set its password")
    create.add_argument("name")
    create.add_argument("--password", help="the password (default: $HEADWATER_PASSWORD, else asked for)")
    create.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS,
                        help=f"SCRAM iterations, at least {MIN_ITERATIONS} (default %(default)s)")
    create.set_defaults(func=edits(_create))
    listing = actions.add_parser("list", help="list users and their mechanisms")
    listing.set_defaults(func=edits(_list))
    delete = actions.add_parser("delete", help="delete a user")
    delete.add_argument("name")
    delete.set_defaults(func=edits(_delete))
    for action in (create, listing, delete):
        add_client_args(action)
        add_offline_args(action, "users")


def _wire(mechanism: str) -> ScramMechanism:
    return ScramMechanism[mechanism.replace("-", "_")]


def _create(args) -> int:
    if args.iterations < MIN_ITERATIONS:
        raise CommandError(f"--iterations {args.iterations}: SCRAM needs at least {MIN_ITERATIONS}")
    directory = offline_dir(args)
    password = args.password or os.environ.get("HEADWATER_PASSWORD") or getpass.getpass(f"password for {args.name}: ")
    if not password:
        raise CommandError("the password is empty")
    if directory is not None:
        store = CredentialStore(directory)
        for mechanism in MECHANISMS:
            store.set(args.name, mechanism, make_credential(mechanism, password, args.iterations))
    else:  # the client salts and hashes: the password itself never goes over the wire
        upserts = [UserScramCredentialUpsertion(args.name, ScramCredentialInfo(_wire(m), args.iterations),
                                                password.encode()) for m in MECHANISMS]
        admin = AdminClient(client_config(args))
        for future in admin.alter_user_scram_credentials(upserts).values():
            admin_result(admin, future)
    confirm(args, f"user {args.name} can authenticate with PLAIN, {', '.join(MECHANISMS)}",
            [{"user": args.name, "mechanisms": list(MECHANISMS)}])
    return 0


def _list(args) -> int:
    directory = offline_dir(args)
    if directory is not None:
        users = CredentialStore(directory).users()
    else:
        admin = AdminClient(client_config(args))  # kept until the answer: a destroyed client fails its futures
        described = admin_result(admin, admin.describe_user_scram_credentials())
        users = {user: sorted(info.mechanism.name.replace("_", "-") for info in d.scram_credential_infos)
                 for user, d in sorted(described.items())}
    emit(args, [{"user": user, "mechanisms": list(mechanisms)} for user, mechanisms in users.items()], title="users")
    return 0


def _delete(args) -> int:
    directory = offline_dir(args)
    if directory is not None:
        if not CredentialStore(directory).delete(args.name):
            raise CommandError(f"no user {args.name!r} in {directory}")
    else:
        admin = AdminClient(client_config(args))
        described = admin_result(admin, admin.describe_user_scram_credentials([args.name])[args.name])
        deletions = [UserScramCredentialDeletion(args.name, info.mechanism)
                     for info in described.scram_credential_infos]
        for future in admin.alter_user_scram_credentials(deletions).values():
            admin_result(admin, future)
    confirm(args, f"user {args.name} deleted", [{"user": args.name, "deleted": True}])
    return 0
