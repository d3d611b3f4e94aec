"""KIP-848 consumer groups' membership, kept in ``__consumer_offsets`` beside the classic groups'.

What Kafka persists for a consumer group, in our own JSON shapes (keys with sorted keys, so
compaction keeps the latest of each; a null value deletes the key):

    key   {"group": G, "type": "consumer_group"}
    value {"epoch": N, "assignment_epoch": N, "partition_counts": {topic: count}}

    key   {"group": G, "member": M, "type": "consumer_member"}
    value {"instance_id", "rack_id", "client_id", "client_host", "rebalance_timeout_ms",
           "subscribed_topic_names": [...], "subscribed_topic_regex", "server_assignor",
           "epoch", "previous_epoch", "state", "left_static",
           "assigned": {topic: [partitions]}, "revoking": {...}, "target": {...}}

One record per member, as Kafka's: a member's heartbeat rewrites its own record only, never
the whole group's. The store remembers what it last wrote for each key (as tuples, compared
without encoding anything: heartbeats are frequent) and writes only what differs, so a
heartbeat that changes nothing writes nothing, and a write that failed is tried again at the
group's next change. Under ``--flush always`` a write's fsync is the broker's group commit's,
off the event loop: the heartbeat awaits it before it is answered. Records that do not parse
are skipped with a warning.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from headwater.broker.internal_topic import json_bytes
from headwater.protocol.errors import ErrorCode

from .assignors import Partitions
from .consumer_group import ConsumerGroup, Member, MemberState, Saved
from .store import CONSUMER_GROUP, CONSUMER_MEMBER, OFFSETS_TOPIC, GroupStore

log = logging.getLogger("headwater.groups")


def group_key(group_id: str) -> bytes:
    return json_bytes({"group": group_id, "type": CONSUMER_GROUP})


def member_key(group_id: str, member_id: str) -> bytes:
    return json_bytes({"group": group_id, "member": member_id, "type": CONSUMER_MEMBER})


class GroupRecord(NamedTuple):
    epoch: int
    assignment_epoch: int
    partition_counts: dict[str, int]


class MemberRecord(NamedTuple):
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    subscribed_names: frozenset[str]
    subscribed_regex: re.Pattern | None
    server_assignor: str | None
    epoch: int
    previous_epoch: int
    state: MemberState
    left_static: bool
    assigned: Partitions
    revoking: Partitions
    target: Partitions


def _group_record(group: ConsumerGroup) -> GroupRecord:
    return GroupRecord(group.epoch, group.assignment_epoch, dict(group.partition_counts))


def _member_record(group: ConsumerGroup, m: Member) -> MemberRecord:
    return MemberRecord(m.instance_id, m.rack_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.subscribed_names, m.subscribed_regex, m.server_assignor, m.epoch, m.previous_epoch,
                        m.state, m.left_static, m.assigned, m.revoking, group.target.get(m.member_id, frozenset()))


def _group_value(r: GroupRecord) -> bytes:
    return json_bytes({"epoch": r.epoch, "assignment_epoch": r.assignment_epoch,
                       "partition_counts": r.partition_counts})


def _by_topic(partitions: Partitions) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    return by_topic


def _partitions(by_topic: dict[str, list[int]]) -> Partitions:
    return frozenset((str(topic), int(p)) for topic, ps in by_topic.items() for p in ps)


def _member_value(r: MemberRecord) -> bytes:
    return json_bytes({
        "instance_id": r.instance_id, "rack_id": r.rack_id, "client_id": r.client_id, "client_host": r.client_host,
        "rebalance_timeout_ms": r.rebalance_timeout_ms, "subscribed_topic_names": sorted(r.subscribed_names),
        "subscribed_topic_regex": r.subscribed_regex.pattern if r.subscribed_regex is not None else None,
        "server_assignor": r.server_assignor, "epoch": r.epoch, "previous_epoch": r.previous_epoch,
        "state": r.state.value, "left_static": r.left_static, "assigned": _by_topic(r.assigned),
        "revoking": _by_topic(r.revoking), "target": _by_topic(r.target)})


@dataclass
class _Written:
    """What was last written for a group's keys; None: not known to be (a write whose fsync failed)."""
    group: GroupRecord | None = None
    members: dict[str, MemberRecord | None] = field(default_factory=dict)
    synced: asyncio.Future[ErrorCode] | None = None   # the last write's fsync


class ConsumerGroupStore:
    def __init__(self, offsets: GroupStore):
        """Writes to the classic groups' topic; replays what their replay hands over."""
        self._offsets, self._topic = offsets, offsets.topic
        self._written: dict[str, _Written] = {}

    def save(self, group: ConsumerGroup, member_ids: Iterable[str]) -> Saved:
        """Write what changed of the group record and of the given members' records, and a
        tombstone for each member written before and gone now; in one batch, appended at the
        call. Returns the append's error and, under ``--flush always``, its fsync in the broker's
        group commit to await. What is appended counts as written at once, so that the next
        heartbeats do not write it again; should its fsync fail, it is written at the next change.
        A save that writes nothing returns the fsync of the group's last write while it runs: as
        Kafka's coordinator, no answer tells what is not durable yet (a client's retry, say)."""
        written = self._written.setdefault(group.group_id, _Written())
        pairs: list[tuple[bytes, bytes | None]] = []
        group_record = _group_record(group)
        if group_record != written.group:
            pairs.append((group_key(group.group_id), _group_value(group_record)))
        members: dict[str, MemberRecord | None] = {}
        for member_id in member_ids:
            record = _member_record(group, group.members[member_id])
            if record != written.members.get(member_id):
                members[member_id] = record
        members.update((gone, None) for gone in written.members.keys() - group.members.keys())
        pairs += [(member_key(group.group_id, member_id), None if record is None else _member_value(record))
                  for member_id, record in members.items()]
        if not pairs:
            running = written.synced is not None and not written.synced.done()
            return ErrorCode.NONE, written.synced if running else None
        error, fsync = self._topic.write_then_fsync(pairs)
        if error:
            return error, None
        written.group = group_record
        for member_id, record in members.items():
            if record is None:
                del written.members[member_id]
            else:
                written.members[member_id] = record
        if fsync is None:
            return error, None
        # a task, so that a failed fsync is noted whether or not anyone awaits it (a timer's write)
        synced = written.synced = asyncio.ensure_future(fsync)
        synced.add_done_callback(functools.partial(self._not_synced, group.group_id, list(members)))
        return error, synced

    def _not_synced(self, group_id: str, member_ids: list[str], synced: asyncio.Future) -> None:
        """A write whose fsync failed (or whose outcome is unknown: cancelled as the loop stops) may
        be lost: its keys count as not written, so the group's next change writes them again (a
        member gone since gets its tombstone again)."""
        if not (synced.cancelled() or synced.exception() is not None or synced.result()):
            return
        written = self._written.get(group_id)
        if written is not None:   # else deleted since: its tombstones came after
            written.group = None
            written.members.update(dict.fromkeys(member_ids))

    def delete(self, group_id: str) -> ErrorCode:
        """Tombstones for an empty group's record (its members' are written as they leave)."""
        written = self._written.get(group_id, _Written())
        error = self._topic.write([(group_key(group_id), None)] +
                                  [(member_key(group_id, m), None) for m in written.members])
        if not error:
            self._written.pop(group_id, None)
        return error

    # --- replay ----------------------------------------------------------------------------

    def load(self) -> dict[str, ConsumerGroup]:
        """Every consumer group as its records last left it; the owners and static members
        derived from the members."""
        groups: dict[str, ConsumerGroup] = {}
        for key, value in self._offsets.consumer_group_records():
            try:
                _apply(groups, key, value)
            except Exception as exc:  # noqa: BLE001 (missing fields, wrong types: skipped, as InternalTopic.replay does)
                log.warning("skipping unreadable record %r of %s: %r", key, OFFSETS_TOPIC, exc)
        for group in groups.values():
            for member in group.members.values():
                group.owners.update((tp, member.member_id) for tp in member.assigned | member.revoking)
                if member.instance_id is not None:
                    group.static_members[member.instance_id] = member.member_id
            self._written[group.group_id] = _Written(_group_record(group), {
                m.member_id: _member_record(group, m) for m in group.members.values()})
        return groups


def _apply(groups: dict[str, ConsumerGroup], key: dict, value: dict | None) -> None:
    kind, group_id = key["type"], key["group"]
    if kind == CONSUMER_GROUP:
        if value is None:
            groups.pop(group_id, None)
            return
        epochs = int(value["epoch"]), int(value["assignment_epoch"])   # parsed whole before the group changes
        counts = {str(t): int(n) for t, n in value["partition_counts"].items()}
        group = groups.setdefault(group_id, ConsumerGroup(group_id))
        (group.epoch, group.assignment_epoch), group.partition_counts = epochs, counts
    elif kind == CONSUMER_MEMBER:
        member_id = key["member"]
        if value is None:
            group = groups.get(group_id)
            if group is not None:
                group.members.pop(member_id, None)
                group.target.pop(member_id, None)
            return
        member = _member(member_id, value)   # parsed whole before the group changes
        group = groups.setdefault(group_id, ConsumerGroup(group_id))
        group.members[member_id] = member
        group.target[member_id] = _partitions(value["target"])


def _member(member_id: str, v: dict) -> Member:
    regex = v["subscribed_topic_regex"]
    return Member(member_id, v["instance_id"], v["client_id"], v["client_host"], int(v["rebalance_timeout_ms"]),
                  rack_id=v["rack_id"], subscribed_names=frozenset(v["subscribed_topic_names"]),
                  subscribed_regex=re.compile(regex) if regex is not None else None,
                  server_assignor=v["server_assignor"], epoch=int(v["epoch"]),
                  previous_epoch=int(v["previous_epoch"]), state=MemberState(v["state"]),
                  assigned=_partitions(v["assigned"]), revoking=_partitions(v["revoking"]),
                  left_static=bool(v["left_static"]))
