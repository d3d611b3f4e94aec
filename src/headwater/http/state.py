"""Read-only views of the broker's state for the metrics and the console: topics, consumer
groups of both protocols and their lag, records, share-partitions, CDC connectors' stored
positions. Everything here runs on the event loop and reads what the broker holds in memory
(or, for records, its logs), so a scrape or a page costs no Kafka request."""
from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import islice
from typing import NamedTuple

from headwater.broker.broker import Broker
from headwater.broker.groups import assignment
from headwater.broker.groups.consumer_group import ConsumerGroup
from headwater.broker.groups.group import GroupDescription, GroupState
from headwater.broker.share.partition import RecordState
from headwater.log import Log
from headwater.records import Record

# Where `headwater cdc` connectors keep their positions unless given --positions-topic.
CDC_POSITIONS_TOPIC = "headwater-cdc-positions"


class PartitionOffsets(NamedTuple):   # not a frozen dataclass: one is made per partition per scrape (3x dearer)
    topic: str
    partition: int
    committed: int | None   # None: the group never committed this partition
    log_start: int
    log_end: int

    @property
    def lag(self) -> int:
        # log end minus committed, never negative (a log truncated under a commit); a partition never
        # committed lags by every record in its log: what a group reading from the earliest will
        # read (kafka_exporter shows -1 for it and leaves it out of the sum, hiding those records)
        return max(self.log_end - (self.log_start if self.committed is None else self.committed), 0)


Partition = tuple[str, int]
CLASSIC, CONSUMER = "classic", "consumer"   # the group types of ListGroups v5 and Kafka's tools


@dataclass(frozen=True)
class MemberView:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    partitions: list[Partition]          # assigned to it, sorted
    epoch: int | None = None             # consumer protocol: its member epoch
    target: list[Partition] | None = None  # consumer protocol: what the assignor wants it to own


@dataclass(frozen=True)
class GroupView:
    """A consumer group as an operator sees it, whichever protocol (classic, or KIP-848's consumer) it speaks."""
    group_id: str
    type: str                   # CLASSIC or CONSUMER
    state: str                  # Kafka's name of the state
    assignor: str               # classic: the protocol the members chose; consumer: the server-side assignor
    members: list[MemberView]
    epoch: int | None = None             # consumer protocol: the group epoch
    assignment_epoch: int | None = None  # consumer protocol: the epoch of the target assignment


def _classic_view(group: GroupDescription) -> GroupView:
    members = []
    for m in group.members:
        try:
            assigned = assignment.partitions(m.assignment)
        except assignment.MalformedAssignment:
            assigned = {}
        members.append(MemberView(m.member_id, m.instance_id, m.client_id, m.client_host,
                                  sorted((t, p) for t, ps in assigned.items() for p in ps)))
    return GroupView(group.group_id, CLASSIC, group.state.value, group.protocol, members)


def _consumer_view(group: ConsumerGroup) -> GroupView:
    members = [MemberView(m.member_id, m.instance_id, m.client_id, m.client_host, sorted(m.assigned), m.epoch,
                          sorted(group.target.get(m.member_id, ())))
               for m in sorted(group.members.values(), key=lambda m: m.member_id)]
    return GroupView(group.group_id, CONSUMER, group.state.value, group.assignor, members, group.epoch,
                     group.assignment_epoch)


def consumer_group(broker: Broker, group_id: str) -> GroupView | None:
    """The group of either protocol with this id; None if there is none (or it is a share group)."""
    group = broker.consumer_groups.groups.get(group_id)
    if group is not None:
        return _consumer_view(group)
    described = broker.groups.describe(group_id)
    return None if described.state is GroupState.DEAD else _classic_view(described)


def consumer_groups(broker: Broker) -> list[GroupView]:
    """Every consumer group of both protocols, sorted by id. A KIP-848 group's offsets are kept by a
    classic group of the same id (groups/commit_apis.py), which is not listed on its own."""
    kip848 = broker.consumer_groups.groups
    views = [_classic_view(g) for g in broker.groups.list_groups() if g.group_id not in kip848]
    views += [_consumer_view(g) for g in kip848.values()]
    return sorted(views, key=lambda view: view.group_id)


def group_offsets(broker: Broker, group_id: str) -> list[PartitionOffsets]:
    """Committed offset, log end and lag of every partition of the topics the group (of either protocol)
    subscribes to or has committed offsets of (a deleted topic's offsets are not lag), sorted."""
    committed = broker.groups.committed(group_id)
    topics = ({topic for topic, _ in committed} | broker.groups.subscribed_topics(group_id)
              | broker.consumer_groups.subscribed_topics(group_id))
    rows = []
    for name in sorted(topics):
        topic = broker.log_manager.topics.get(name)
        for partition, plog in enumerate(topic.partitions if topic is not None else []):
            offset = committed.get((name, partition))
            rows.append(PartitionOffsets(name, partition, offset.offset if offset is not None else None,
                                         plog.log_start_offset, plog.log_end_offset))
    return rows


def stable_offset(broker: Broker, topic: str, partition: int, plog: Log) -> int:
    """Where a read_committed reader of the partition stops (its last stable offset): what the
    console and the REST reads show, as a read_committed consumer would see the topic."""
    return broker.txn_partitions.last_stable_offset(topic, partition, plog)


def records_from(plog: Log, offset: int, limit: int, upto: int | None) -> list[Record]:
    """Up to ``limit`` records at or after ``offset`` (control batches skipped), in offset order:
    read_committed below ``upto`` (a last stable offset, aborted transactions' records skipped),
    or read_uncommitted, to the log end, with None."""
    return list(islice(plog.records(max(offset, plog.log_start_offset), upto, committed=upto is not None), limit))


@dataclass(frozen=True)
class SharePartitionView:
    """One share-partition of a share group as an operator sees it."""
    topic: str
    partition: int
    start: int          # share-partition start offset (SPSO): everything before it is done
    log_end: int
    in_flight: int      # acquired by a member, not yet acknowledged
    available: int      # waiting for a member: released, or never handed out up to the log end
    archived: int       # given up on since the share-partition began (rejected, out of deliveries)
    dead_lettered: int  # of the archived, written to the dead-letter topic

    @property
    def lag(self) -> int:
        # records at or past the start offset: not yet done by the group
        return max(self.log_end - self.start, 0)


def share_partitions(broker: Broker, group_id: str) -> list[SharePartitionView]:
    """The share-partitions the group has used, and those of its members' topics not fetched yet
    (starting where share.auto.offset.reset will start them), sorted; a deleted topic's are gone."""
    group = broker.share.groups[group_id]
    topics = {topic for topic, _ in group.partitions} | {t for m in group.members.values() for t in m.subscription}
    from_earliest = group.config.get("share.auto.offset.reset") == "earliest"
    rows = []
    for name in sorted(topics):
        topic = broker.log_manager.topics.get(name)
        for partition, plog in enumerate(topic.partitions if topic is not None else []):
            state = group.partitions.get((name, partition))
            if state is None:
                start = plog.log_start_offset if from_earliest else plog.log_end_offset
                rows.append(SharePartitionView(name, partition, start, plog.log_end_offset, 0,
                                               plog.log_end_offset - start, 0, 0))
                continue
            waiting = state.count(RecordState.AVAILABLE) + max(plog.log_end_offset - state.end_offset, 0)
            rows.append(SharePartitionView(name, partition, state.start_offset, plog.log_end_offset,
                                           state.count(RecordState.ACQUIRED), waiting, state.archived_total,
                                           state.dead_lettered))
    return rows


@dataclass(frozen=True)
class ConnectorPosition:
    """A CDC connector's last stored position: the broker holds every change event before it."""
    connector: str      # the connector's key: "postgresql:SLOT" or "sqlite:/path/of/the.db"
    position: dict      # as the connector stored it: {"lsn": ..., "snapshot_done": ...} or {"id": ...}
    stored_at: int      # Unix ms of the position record

    @property
    def kind(self) -> str:
        return self.connector.partition(":")[0]


def connector_positions(broker: Broker, topic: str = CDC_POSITIONS_TOPIC) -> list[ConnectorPosition]:
    """The latest position of each connector in the positions topic, sorted; none if it does not exist.

    Connectors run in their own processes: this is all the broker knows of them (no source
    position, hence no lag behind the source)."""
    plog = broker.log_manager.get_log(topic, 0)
    if plog is None:
        return []
    latest: dict[str, ConnectorPosition] = {}
    for record in records_from(plog, plog.log_start_offset, plog.log_end_offset - plog.log_start_offset,
                               stable_offset(broker, topic, 0, plog)):
        key = (record.key or b"").decode("utf-8", "replace")
        try:
            position = json.loads(record.value) if record.value is not None else None
        except ValueError:
            continue   # not a connector's record: someone else wrote to the topic
        if isinstance(position, dict):
            latest[key] = ConnectorPosition(key, position, record.timestamp)
        else:
            latest.pop(key, None)   # a tombstone: the connector's position was deleted
    return sorted(latest.values(), key=lambda c: c.connector)
