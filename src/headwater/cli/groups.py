"""`headwater groups`: list, describe (with lag), reset offsets of, and delete consumer groups;
share groups too (describe, alter, redrive: see share_groups.py).

Everything goes through confluent-kafka's AdminClient (and a plain Consumer to peek at
the oldest unconsumed record), so the command works against Kafka as well as Headwater.
"""
from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, ConsumerGroupType, KafkaError, KafkaException,
                             TopicCollection, TopicPartition)
from confluent_kafka.admin import AdminClient, OffsetSpec

from headwater.broker.groups.reset import ResetTo
from headwater.cli import share_groups
from headwater.cli.common import (CommandError, add_client_args, admin_result, answer, client_config, emit,
                                  emit_document, name_value)

TIMEOUT = 30  # seconds for each admin call
PEEK_TIMEOUT = 5  # seconds to find the oldest unconsumed record of the lagging partitions


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("groups", help="consumer groups: members, committed offsets, lag, replay")
    sub = p.add_subparsers(dest="groups_command", required=True)
    listing = sub.add_parser("list", help="list the consumer groups")
    add_client_args(listing)
    listing.set_defaults(func=list_groups)
    describe = sub.add_parser("describe", help="members, assignment, committed offsets, lag and its age")
    describe.add_argument("group")
    add_client_args(describe)
    describe.set_defaults(func=describe_group)
    reset = sub.add_parser("reset-offsets", help="preview, or with --execute commit, new offsets for a group "
                           "(the group must have no members)")
    reset.add_argument("group")
    reset.add_argument("--topic", required=True)
    mode = reset.add_mutually_exclusive_group(required=True)
    mode.add_argument("--to-earliest", action="store_true", help="the first offset still in the log")
    mode.add_argument("--to-latest", action="store_true", help="the log end: skip everything not yet consumed")
    mode.add_argument("--to-offset", type=int, metavar="N", help="offset N in every partition (clamped to the log)")
    mode.add_argument("--to-datetime", type=_datetime, metavar="ISO",
                      help="the first record at or after this time (ISO 8601; UTC unless a zone is given)")
    mode.add_argument("--shift-by", type=int, metavar="N", help="move by N records (negative: back), clamped")
    write = reset.add_mutually_exclusive_group()
    write.add_argument("--execute", action="store_true", help="commit the new offsets (without it: a preview)")
    write.add_argument("--dry-run", action="store_true", help="show the new offsets only (the default)")
    reset.add_argument("--allow-new-group", action="store_true",
                       help="reset a group that does not exist yet, creating it with these offsets")
    add_client_args(reset)
    reset.set_defaults(func=reset_offsets)
    delete = sub.add_parser("delete", help="delete a group without members, with its committed offsets")
    delete.add_argument("group")
    add_client_args(delete)
    delete.set_defaults(func=delete_group)
    alter = sub.add_parser("alter", help="change a share group's configs (share.record.lock.duration.ms, "
                           "share.delivery.count.limit, errors.deadletterqueue.topic.name, ...)")
    alter.add_argument("group")
    alter.add_argument("--config", action="append", default=[], type=name_value, metavar="NAME=VALUE")
    alter.add_argument("--delete-config", action="append", default=[], metavar="NAME", help="back to the default")
    add_client_args(alter)
    alter.set_defaults(func=lambda args: share_groups.alter(args, _admin(args)))
    redrive = sub.add_parser("redrive", help="produce a dead-letter topic's records back to the topics they came from")
    redrive.add_argument("topic", help="the dead-letter topic")
    add_client_args(redrive)
    redrive.set_defaults(func=share_groups.redrive)


def _datetime(text: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date-time, e.g. 2026-11-22T10:00:00Z") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


QUIET = 3  # librdkafka log_level: errors only, so informational lines do not trail our one-line messages


def _admin(args) -> AdminClient:
    return AdminClient(client_config(args, log_level=QUIET))


def _result(admin, future):
    return admin_result(admin, future, TIMEOUT)


# --- list ----------------------------------------------------------------------------------

def list_groups(args) -> int:
    admin = _admin(args)
    listed = _result(admin, admin.list_consumer_groups(request_timeout=TIMEOUT))
    if listed.errors:  # a broker that could not list its groups: say so, not an empty list
        failure = f"{len(listed.errors)} broker(s) could not list their consumer groups: {listed.errors[0].str()}"
        if not listed.valid:
            raise CommandError(failure)
        print(f"note: {failure}", file=sys.stderr)
    rows = [{"group": g.group_id, "type": _type(g), "state": g.state.name.lower()} for g in listed.valid]
    emit(args, sorted(rows + share_groups.listed(args), key=lambda row: row["group"]), title="groups")
    return 0


def _type(group) -> str:
    """Kafka's group types (classic, consumer: KIP-848's protocol), and simple for a group that only
    commits offsets (no protocol type: it never joins)."""
    if group.type == ConsumerGroupType.CONSUMER:
        return "consumer"
    return "simple" if group.is_simple_consumer_group else "classic"


# --- describe ------------------------------------------------------------------------------

def _committed(admin, group: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group)]
    result = _result(admin, admin.list_consumer_group_offsets(request, request_timeout=TIMEOUT)[group])
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def _oldest_unconsumed(args, positions: dict[tuple[str, int], int]) -> dict[tuple[str, int], int]:
    """Timestamp (ms) of the first record at or after each position: what the group will read next."""
    if not positions:
        return {}
    consumer = Consumer(client_config(args, **{"group.id": "headwater-cli-peek", "enable.auto.commit": False,
                                               "fetch.wait.max.ms": 100, "log_level": QUIET}))
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
    found, deadline = {}, time.monotonic() + PEEK_TIMEOUT
    while len(found) < len(positions) and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            continue
        key = (msg.topic(), msg.partition())
        if key not in found:
            found[key] = msg.timestamp()[1]
            consumer.pause([TopicPartition(*key)])
    consumer.close()
    return found


def describe_group(args) -> int:
    admin = _admin(args)
    desc = _result(admin, admin.describe_consumer_groups([args.group], request_timeout=TIMEOUT)[args.group])
    if desc.state.name == "DEAD":  # not a classic group: perhaps a share group
        return share_groups.describe(args, admin)
    owner = {}
    members = []
    for m in desc.members:
        assigned = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
        owner.update((tp, m.member_id) for tp in assigned)
        member = {"member": m.member_id, "instance": m.group_instance_id, "client_id": m.client_id,
                  "host": m.host, "partitions": [f"{t}-{p}" for t, p in assigned]}
        if m.target_assignment is not None:   # KIP-848: what the broker's assignor wants the member to own
            member["target_partitions"] = sorted(f"{tp.topic}-{tp.partition}"
                                                 for tp in m.target_assignment.topic_partitions)
        members.append(member)
    committed = _committed(admin, args.group)
    # every partition of a topic the group reads or has read: one it never committed is lag too
    partitions = [(topic, p) for topic, ps in _partitions_of(admin, {t for t, _ in [*committed, *owner]}).items()
                  for p in ps]
    starts = share_groups.log_offsets(admin, partitions, OffsetSpec.earliest())
    ends = share_groups.log_offsets(admin, partitions, OffsetSpec.latest())
    # lag from the committed offset, as Kafka's tool has it; a partition never committed counts every
    # record in its log (what a group with auto.offset.reset=earliest will read; kafka_exporter says -1)
    since = {tp: committed.get(tp, starts[tp]) for tp in partitions}
    oldest = _oldest_unconsumed(args, {tp: max(o, starts[tp]) for tp, o in since.items() if ends[tp] > o})
    now = time.time() * 1000
    offsets = []
    for tp in partitions:
        ts = oldest.get(tp)
        offsets.append({"topic": tp[0], "partition": tp[1], "committed_offset": committed.get(tp),
                        "log_start_offset": starts[tp], "log_end_offset": ends[tp],
                        "lag": max(ends[tp] - since[tp], 0),
                        "oldest_unconsumed_age_s": round(max(now - ts, 0) / 1000, 1) if ts is not None else None,
                        "member": owner.get(tp)})
    summary = {"group": args.group, "type": _type(desc), "state": desc.state.name.lower(),
               "protocol": desc.partition_assignor or None, "lag": sum(o["lag"] for o in offsets)}
    emit_document(args, {**summary, "members": members, "offsets": offsets},
                  [("group", [summary]), ("members", members), ("offsets", offsets)])
    return 0


# --- reset-offsets -------------------------------------------------------------------------

def _partitions_of(admin, topics: set[str]) -> dict[str, list[int]]:
    """topic -> its partitions, for those of ``topics`` that exist, sorted. DescribeTopics, not
    list_topics: a Metadata request for a topic by name would auto-create it."""
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(sorted(topics)), request_timeout=TIMEOUT)
    found = {}
    for topic, future in sorted(futures.items()):
        try:
            found[topic] = sorted(p.id for p in answer(admin, future, TIMEOUT).partitions)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:  # a deleted topic's offsets are not lag
                raise CommandError(exc.args[0].str()) from None
    return found


def _reset_to(args) -> ResetTo:
    if args.to_earliest:
        return ResetTo("earliest")
    if args.to_latest:
        return ResetTo("latest")
    if args.to_offset is not None:
        return ResetTo("offset", args.to_offset)
    if args.shift_by is not None:
        return ResetTo("shift", args.shift_by)
    return ResetTo("datetime", int(args.to_datetime.timestamp() * 1000))


def _targets(args, admin, tps: list[tuple[str, int]], committed) -> dict[tuple[str, int], int]:
    reset_to = _reset_to(args)
    earliest = share_groups.log_offsets(admin, tps, OffsetSpec.earliest())
    latest = share_groups.log_offsets(admin, tps, OffsetSpec.latest())
    by_time = (share_groups.log_offsets(admin, tps, OffsetSpec.for_timestamp(reset_to.value))
               if reset_to.mode == "datetime" else {tp: -1 for tp in tps})
    return {tp: reset_to.target(earliest[tp], latest[tp], committed.get(tp), by_time[tp]) for tp in tps}


def reset_offsets(args) -> int:
    """As kafka-consumer-groups --reset-offsets: a preview unless --execute; a group that does not
    exist is refused unless --allow-new-group (Kafka's tool creates it silently: a typo would too)."""
    admin = _admin(args)
    desc = _result(admin, admin.describe_consumer_groups([args.group], request_timeout=TIMEOUT)[args.group])
    if desc.members:
        raise CommandError(f"consumer group {args.group!r} has {len(desc.members)} active member(s); "
                           "stop its consumers before resetting offsets")
    committed = _committed(admin, args.group) if desc.state.name != "DEAD" else {}
    if desc.state.name == "DEAD" and not committed and not args.allow_new_group:
        raise CommandError(f"consumer group {args.group!r} does not exist; "
                           "give --allow-new-group to create it with these offsets")
    partitions = _partitions_of(admin, {args.topic})
    if args.topic not in partitions:
        raise CommandError(f"topic {args.topic!r} does not exist")
    tps = [(args.topic, p) for p in partitions[args.topic]]
    targets = _targets(args, admin, tps, committed)
    if args.execute:
        request = [ConsumerGroupTopicPartitions(args.group, [TopicPartition(t, p, o) for (t, p), o in targets.items()])]
        result = _result(admin, admin.alter_consumer_group_offsets(request, request_timeout=TIMEOUT)[args.group])
        failed = [tp for tp in result.topic_partitions if tp.error is not None]
        if failed:
            raise CommandError(f"could not commit {failed[0].topic}-{failed[0].partition}: {failed[0].error.str()}")
    else:
        print("preview: nothing committed; add --execute to commit these offsets", file=sys.stderr)
    rows = [{"topic": t, "partition": p, "committed_offset": committed.get((t, p)), "new_offset": targets[(t, p)]}
            for t, p in tps]
    emit(args, rows, title=f"offsets of {args.group}" + ("" if args.execute else " (preview: not committed)"))
    return 0


# --- delete --------------------------------------------------------------------------------

def delete_group(args) -> int:
    admin = _admin(args)
    try:
        answer(admin, admin.delete_consumer_groups([args.group], request_timeout=TIMEOUT)[args.group], TIMEOUT)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.NON_EMPTY_GROUP:
            raise CommandError(f"consumer group {args.group!r} has active members; stop them first") from None
        if error.code() == KafkaError.GROUP_ID_NOT_FOUND:
            raise CommandError(f"consumer group {args.group!r} does not exist") from None
        raise CommandError(error.str()) from None
    emit(args, [{"group": args.group, "deleted": True}], title="deleted")
    return 0
