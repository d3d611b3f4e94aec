"""Committed offsets and group metadata, kept in the broker's own log.

The internal topic ``__consumer_offsets`` (one partition, ``cleanup.policy=compact``) is
the durable state of every group; memory holds a cache rebuilt from it at start. Each
record is keyed so that compaction keeps only the latest state of each thing:

    key   {"group": G, "type": "offset", "topic": T, "partition": P}   (JSON, sorted keys)
    value {"offset": N, "leader_epoch": E, "metadata": M, "commit_timestamp": MS}

    key   {"group": G, "type": "group"}
    value {"protocol_type": ..., "protocol": ..., "generation": N, "leader": ..., "members": [
           {"member_id", "instance_id", "client_id", "client_host", "session_timeout_ms",
            "rebalance_timeout_ms", "subscription": base64, "assignment": base64}]}

A null value (tombstone) deletes the key: DeleteGroups writes one for the group and each
of its offsets. KIP-848 consumer groups keep their membership in the same topic under keys
of their own types (``consumer_group_store.py``): this replay hands those records over to it,
so that one pass over the topic serves both. Records that do not parse (someone produced to
the topic) are skipped with a warning when replayed.
"""
from __future__ import annotations

import base64
from collections.abc import Awaitable
from typing import Any

from headwater.broker.appender import Appender
from headwater.broker.clock import Clock
from headwater.broker.internal_topic import InternalTopic, json_bytes
from headwater.protocol.errors import ErrorCode

from .group import CommittedOffset, Group, GroupState, Member

OFFSETS_TOPIC = "__consumer_offsets"
# KIP-848 consumer groups' records, kept in the same topic by consumer_group_store.py
CONSUMER_GROUP, CONSUMER_MEMBER = "consumer_group", "consumer_member"
# A replayed record: its key and value (None for a tombstone), parsed JSON
Replayed = tuple[Any, Any]


def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return json_bytes({"group": group_id, "type": "offset", "topic": topic, "partition": partition})


def group_key(group_id: str) -> bytes:
    return json_bytes({"group": group_id, "type": "group"})


def _group_value(group: Group) -> bytes:
    members = [{"member_id": m.member_id, "instance_id": m.instance_id, "client_id": m.client_id,
                "client_host": m.client_host, "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "subscription": base64.b64encode(m.metadata(group.protocol)).decode(),
                "assignment": base64.b64encode(m.assignment).decode()}
               for m in group.members.values()] if group.protocol else []
    return json_bytes({"protocol_type": group.protocol_type, "protocol": group.protocol, "generation": group.generation,
                  "leader": group.leader, "members": members})


class GroupStore:
    def __init__(self, appender: Appender, clock: Clock):
        self.topic = InternalTopic(OFFSETS_TOPIC, appender, clock)
        self._write = self.topic.write
        self._handed_over: list[Replayed] | None = None   # the consumer groups' records of the last load()

    def store_offsets(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
        return self._write(_offset_records(group_id, offsets))

    def store_offsets_then_fsync(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]
                                 ) -> tuple[ErrorCode, Awaitable[ErrorCode] | None]:
        """``store_offsets``, appended at the call, its fsync (under ``--flush always``) left to the
        broker's group commit: (the append's error, the fsync to await or None)."""
        return self.topic.write_then_fsync(_offset_records(group_id, offsets))

    def store_group(self, group: Group) -> ErrorCode:
        return self._write([(group_key(group.group_id), _group_value(group))])

    def delete_group(self, group: Group) -> ErrorCode:
        tombstones = [(group_key(group.group_id), None)]
        return self._write(tombstones + self._offset_tombstones(group.group_id, group.offsets))

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> ErrorCode:
        return self._write(self._offset_tombstones(group_id, partitions))

    @staticmethod
    def _offset_tombstones(group_id: str, partitions) -> list[tuple[bytes, None]]:
        return [(offset_key(group_id, topic, partition), None) for topic, partition in partitions]

    # --- replay ----------------------------------------------------------------------------

    def load(self) -> dict[str, Group]:
        """Rebuild every classic group from the log: the last record of each key wins, as compaction
        keeps it. The consumer groups' records are kept for ``consumer_group_records``."""
        groups: dict[str, Group] = {}
        handed_over: list[Replayed] = []

        def apply(key: dict, value: dict | None) -> None:
            if key["type"] in (CONSUMER_GROUP, CONSUMER_MEMBER):
                handed_over.append((key, value))
            else:
                _apply(groups, key, value)
        self.topic.replay(apply)
        self._handed_over = handed_over
        return groups

    def consumer_group_records(self) -> list[Replayed]:
        """The consumer groups' records of the replay ``load()`` made (handed over once), or of a
        replay made now if there was none."""
        if self._handed_over is None:
            self.load()
        records, self._handed_over = self._handed_over, None
        return records


def _offset_records(group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> list[tuple[bytes, bytes]]:
    return [(offset_key(group_id, topic, partition),
             json_bytes({"offset": c.offset, "leader_epoch": c.leader_epoch, "metadata": c.metadata,
                         "commit_timestamp": c.commit_timestamp}))
            for (topic, partition), c in offsets.items()]


def _apply(groups: dict[str, Group], key: dict, value: dict | None) -> None:
    group_id = key["group"]
    group = groups.get(group_id)
    if key["type"] == "offset":
        tp = (key["topic"], int(key["partition"]))
        if value is None:
            if group is not None:
                group.offsets.pop(tp, None)
            return
        committed = CommittedOffset(int(value["offset"]), int(value["leader_epoch"]), value["metadata"],
                                    int(value["commit_timestamp"]))
        group = group or groups.setdefault(group_id, Group(group_id))
        group.offsets[tp] = committed
    elif key["type"] == "group":
        if value is None:
            groups.pop(group_id, None)
            return
        restored = Group(group_id, generation=int(value["generation"]), protocol_type=value["protocol_type"],
                         protocol=value["protocol"], leader=value["leader"],
                         offsets=group.offsets if group is not None else {})
        for m in value["members"]:
            member = Member(m["member_id"], m["instance_id"], m["client_id"], m["client_host"],
                            int(m["session_timeout_ms"]), int(m["rebalance_timeout_ms"]),
                            [(value["protocol"], base64.b64decode(m["subscription"]))],
                            base64.b64decode(m["assignment"]))
            restored.members[member.member_id] = member
            if member.instance_id is not None:
                restored.static_members[member.instance_id] = member.member_id
        restored.state = GroupState.STABLE if restored.members else GroupState.EMPTY
        groups[group_id] = restored
    else:
        raise ValueError(f"unknown record type {key['type']!r}")
