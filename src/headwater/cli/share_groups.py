"""`headwater groups` for share groups (KIP-932): describe, alter configs, re-drive dead letters.

confluent-kafka's AdminClient has no share-group calls yet, so ``describe`` asks the broker
with ShareGroupDescribe through our own codec, and reads each share-partition's delivery
state from the ``__share_group_state`` topic, as any consumer could. ``alter`` is
IncrementalAlterConfigs on the GROUP resource, and ``redrive`` is a plain consumer and
producer: both work against Kafka as well.
"""
from __future__ import annotations

import json
import ssl
import sys
import time
import uuid

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, OffsetSpec, ResourceType

from headwater.broker.share.partition import RecordState
from headwater.broker.share.state_records import STATE_TOPIC, record_states
from headwater.cli.common import CommandError, admin_result, client_config, emit, emit_document
from headwater.protocol.errors import ErrorCode
from headwater.protocol.messages import ApiKey, MESSAGE_CLASSES
from headwater.protocol.request import (AuthenticationFailed, NoCoordinator, UnsupportedSecurity, coordinator,
                                        request)
from headwater.protocol.share_messages import ShareGroupDescribeRequest

DLQ_HEADER = "__dlq.errors."
QUIET = 3
POLL_IDLE_S = 2.0


def _one_shot(args, call, *arguments):
    """``call`` (the one-shot client's ``request`` or ``coordinator``), connected as --command-config says."""
    try:
        return call(*arguments, security=args.command_config)
    except (UnsupportedSecurity, AuthenticationFailed, NoCoordinator, ssl.SSLError) as exc:
        raise CommandError(f"{args.bootstrap_server}: {exc}") from None


def listed(args) -> list[dict]:
    """Share groups as ``groups list`` rows (librdkafka's ListGroups keeps consumer-protocol groups only)."""
    ListGroupsRequest = MESSAGE_CLASSES[ApiKey.LIST_GROUPS][0]
    groups = []
    for broker in brokers(args):  # each broker lists the groups it coordinates
        try:
            response = _one_shot(args, request, broker, ListGroupsRequest(states_filter=[], types_filter=["share"]), 5)
        except OSError:  # e.g. a broker without ListGroups v5 closes the connection
            print(f"note: {broker} cannot list share groups (no ListGroups v5); its share groups are not listed",
                  file=sys.stderr)
            continue
        groups.extend(response.groups)
    return [{"group": g.group_id, "type": "share", "state": g.group_state.lower()} for g in groups]


def brokers(args) -> list[str]:
    """HOST:PORT of every broker of the cluster, from Metadata."""
    admin = AdminClient(client_config(args, log_level=QUIET))
    return sorted(f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values())


def describe(args, admin) -> int:
    """Describe a share group, or raise CommandError if there is none by that name."""
    at = _one_shot(args, coordinator, args.bootstrap_server, args.group)
    described = _one_shot(args, request, at, ShareGroupDescribeRequest(group_ids=[args.group],
                                                                        include_authorized_operations=False), 1)
    group = described.groups[0]
    if group.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
        raise CommandError(f"group {args.group!r} does not exist")
    if group.error_code:
        raise CommandError(f"cannot describe share group {args.group!r}: {group.error_message}")
    members = [{"member": m.member_id, "client_id": m.client_id, "host": m.client_host, "epoch": m.member_epoch,
                "partitions": [f"{tp.topic_name}-{p}" for tp in m.assignment.topic_partitions for p in tp.partitions]}
               for m in group.members]
    resource = ConfigResource(ResourceType.GROUP, args.group)
    described = admin_result(admin, admin.describe_configs([resource])[resource])
    configs = {name: entry.value for name, entry in described.items()}
    states = _share_partition_states(args, args.group)
    # every partition of an assigned topic: one no member has fetched yet is waiting too
    assigned = {tp.topic_name for m in group.members for tp in m.assignment.topic_partitions}
    topics = {t.topic: sorted(t.partitions) for t in admin.list_topics(timeout=10).topics.values()
              if t.topic in assigned | {t for t, _ in states}}
    keys = sorted({(t, p) for t, ps in topics.items() for p in ps} | set(states))
    starts, ends = (log_offsets(admin, keys, spec) for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))
    partitions = []
    for key in keys:
        log_end = ends[key]
        # a share-partition not fetched yet starts where share.auto.offset.reset says when first fetched
        state = states.get(key) or {"start": starts[key] if configs.get("share.auto.offset.reset") == "earliest"
                                    else log_end, "records": [], "archived": 0, "dead_lettered": 0}
        state.setdefault("end", state["start"])
        kinds = [s for _, s, _ in record_states(state)]
        in_window = state["end"] - state["start"]
        done = sum(1 for s in kinds if s in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED))
        acquired = kinds.count(RecordState.ACQUIRED)
        partitions.append({"topic": key[0], "partition": key[1], "start_offset": state["start"],
                           "log_end_offset": log_end, "lag": max(log_end - state["start"], 0),
                           "in_flight": acquired,
                           "available": in_window - done - acquired + max(log_end - state["end"], 0),
                           "archived": state["archived"], "dead_lettered": state["dead_lettered"]})
    summary = {"group": args.group, "type": "share", "state": group.group_state.lower(), "epoch": group.group_epoch,
               "lag": sum(p["lag"] for p in partitions)}
    config_rows = [{"config": name, "value": value} for name, value in configs.items()]
    emit_document(args, {**summary, "members": members, "partitions": partitions, "configs": config_rows},
                  [("share group", [summary]), ("members", members), ("share-partitions", partitions),
                   ("configs", config_rows)])
    return 0


def log_offsets(admin, keys: list[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
    if not keys:
        return {}
    futures = admin.list_offsets({TopicPartition(t, p): spec for t, p in keys})
    return {(tp.topic, tp.partition): admin_result(admin, f).offset for tp, f in futures.items()}


def _share_partition_states(args, group: str) -> dict[tuple[str, int], dict]:
    """The latest state record of each share-partition of ``group`` in the state topic."""
    consumer = Consumer(client_config(args, **{"group.id": "headwater-cli-share-state", "enable.auto.commit": False,
                                               "log_level": QUIET, "enable.partition.eof": True}))
    low, high = consumer.get_watermark_offsets(TopicPartition(STATE_TOPIC, 0), timeout=10)
    states: dict[tuple[str, int], dict] = {}
    if high > low:
        consumer.assign([TopicPartition(STATE_TOPIC, 0, low)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            key = json.loads(msg.key())
            if key.get("group") == group and key.get("type") == "partition" and msg.value() is not None:
                states[(key["topic"], key["partition"])] = json.loads(msg.value())
    consumer.close()
    return states


def alter(args, admin) -> int:
    entries = []
    for name, value in args.config:
        entries.append(ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET))
    for name in args.delete_config:
        entries.append(ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE))
    if not entries:
        raise CommandError("nothing to change: give --config NAME=VALUE or --delete-config NAME")
    resource = ConfigResource(ResourceType.GROUP, args.group, incremental_configs=entries)
    for future in admin.incremental_alter_configs([resource]).values():
        admin_result(admin, future)
    emit(args, [{"group": args.group, "config": e.name, "value": e.value} for e in entries], title="group configs set")
    return 0


def redrive(args) -> int:
    """Produce every dead letter of ``args.topic`` back to the topic it came from, once: the
    position is committed (group ``headwater-redrive-TOPIC``), so running it again re-drives only
    newer ones. The partitions are assigned, not subscribed to: the group exists only once
    something was re-driven, not after a refusal."""
    topic = AdminClient(client_config(args, log_level=QUIET)).list_topics(timeout=10).topics.get(args.topic)
    if topic is None:
        raise CommandError(f"topic {args.topic!r} does not exist")
    consumer = Consumer(client_config(args, **{"group.id": f"headwater-redrive-{args.topic}",
                                               "enable.auto.commit": False, "enable.partition.eof": True,
                                               "log_level": QUIET}))
    positions = consumer.committed([TopicPartition(args.topic, p) for p in sorted(topic.partitions)], timeout=30)
    consumer.assign([TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                     for tp in positions])
    producer = Producer(client_config(args, log_level=QUIET))
    redriven: dict[str, int] = {}
    # Done once every partition has been read to its end (or nothing came for POLL_IDLE_S, should
    # a partition's end never be reported): the dead letters there when the command ran.
    at_end: set[int] = set()
    idle_since = time.monotonic()
    while len(at_end) < len(positions) and time.monotonic() - idle_since < POLL_IDLE_S:
        msg = consumer.poll(0.2)
        if msg is None or msg.error():
            if msg is not None and msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
            continue
        at_end.discard(msg.partition())
        idle_since = time.monotonic()
        headers = [(k, v) for k, v in (msg.headers() or [])]
        origin = {k[len(DLQ_HEADER):]: v.decode() for k, v in headers if k.startswith(DLQ_HEADER) and v is not None}
        if "topic" not in origin:
            consumer.close()
            raise CommandError(f"{args.topic}-{msg.partition()}@{msg.offset()} is not a dead letter "
                               f"(no {DLQ_HEADER}topic header)")
        key, value = msg.key(), msg.value()
        if value is None:  # the record was not copied: take it from the source topic
            key, value, original = _original(args, origin)
            headers = original
        producer.produce(origin["topic"], key=key, value=value, partition=int(origin["partition"]),
                         headers=[(k, v) for k, v in headers if not k.startswith(DLQ_HEADER)])
        redriven[origin["topic"]] = redriven.get(origin["topic"], 0) + 1
    if producer.flush(30):
        raise CommandError("some re-driven records were not acknowledged by the broker; nothing was committed")
    if redriven:
        consumer.commit(asynchronous=False)
    consumer.close()
    if not redriven:
        print(f"nothing to re-drive from {args.topic}: no dead letters since the last re-drive", file=sys.stderr)
    emit(args, [{"topic": t, "redriven": n} for t, n in sorted(redriven.items())], title=f"re-driven from {args.topic}")
    return 0


def _original(args, origin: dict[str, str]):
    reader = Consumer(client_config(args, **{"group.id": f"headwater-cli-{uuid.uuid4().hex}",
                                             "enable.auto.commit": False, "log_level": QUIET}))
    reader.assign([TopicPartition(origin["topic"], int(origin["partition"]), int(origin["offset"]))])
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            msg = reader.poll(0.5)
            if msg is not None and not msg.error() and msg.offset() == int(origin["offset"]):
                return msg.key(), msg.value(), msg.headers() or []
    finally:
        reader.close()
    raise CommandError(f"{origin['topic']}-{origin['partition']}@{origin['offset']} is no longer in the log, "
                       "and its dead letter holds no copy")
