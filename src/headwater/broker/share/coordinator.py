"""The share-group coordinator: members and their epochs, assignment, expiry, share sessions,
and the share-partitions whose records the members acquire and acknowledge.

Assignment: Kafka's share assignor (``assignor.py``) spreads the partitions over the
members, sharing a partition only when there are more members than partitions; the group
keeps one target assignment, recomputed from the last at each heartbeat so that it stays
put. A member's epoch goes up each time its assignment changes; a heartbeat with another
epoch is fenced. A member that stops heartbeating for the session timeout is removed; the
records it held come back when their acquisition locks expire.

Share sessions (ShareFetch/ShareAcknowledge) are keyed by (group, member): epoch 0 opens
one, -1 closes it (its acknowledgements applied, then the member's other acquired records
released, as Kafka does), and each request otherwise carries the next epoch. A session
outlives its member's leaving: a closing client sends its leaving heartbeat and its final
acknowledgement on two connections at once, and the acknowledgement must count whichever
arrives first. A member that left keeps its records until its session closes, or until
the record lock duration has passed.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Awaitable, Callable

from headwater.broker.clock import Clock, Timer
from headwater.broker.fsync_rounds import settled
from headwater.log import LogManager
from headwater.protocol.errors import ErrorCode

from .assignor import Assignment, assign
from .configs import DEFAULTS, GroupConfig, validate
from .partition import SharePartition, Undo
from .store import ShareStateStore, restore

JOIN, LEAVE = 0, -1                 # member epochs with a meaning
OPEN_SESSION, CLOSE_SESSION = 0, -1  # share session epochs with a meaning

# (group id, topic, partition, offset, delivery count, why): a record archived as undeliverable.
DeadLetter = Callable[[str, str, int, int, int, str], None]


class ShareError(Exception):
    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


@dataclass
class ShareMember:
    member_id: str
    client_id: str
    client_host: str
    epoch: int = 0
    subscription: list[str] = field(default_factory=list)
    assignment: dict[str, list[int]] = field(default_factory=dict)   # topic name -> partitions
    expiry: Timer | None = None


@dataclass
class ShareSession:
    epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    closing: Timer | None = None      # its member left: the session may only be closed, until this fires


@dataclass
class Changes:
    """The share-partitions a request changed, persisted together before it is answered. As Kafka,
    acknowledgements are made durable (fsynced) before the answer, and acquisitions are not waited
    for: a crash of the machine can lose only their delivery count increments (see docs/share_groups.md)."""
    partitions: set[tuple[str, int]] = field(default_factory=set)
    acknowledged: bool = False


@dataclass
class ShareGroup:
    group_id: str
    config: GroupConfig
    epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    partitions: dict[tuple[str, int], SharePartition] = field(default_factory=dict)
    sessions: dict[str, ShareSession] = field(default_factory=dict)
    target: Assignment = field(default_factory=dict)      # member -> topic -> partitions

    @property
    def state(self) -> str:
        return "Stable" if self.members else "Empty"


class ShareCoordinator:
    def __init__(self, log_manager: LogManager, clock: Clock, dead_letter: DeadLetter | None = None,
                 is_classic_group: Callable[[str], bool] = lambda group_id: False,
                 wake: Callable[[str, int], None] = lambda topic, partition: None,
                 store: ShareStateStore | None = None):
        self.log_manager = log_manager
        self.store = store
        self.clock = clock
        self.wake = wake                                  # records became available without the log growing
        self.dead_letter = dead_letter or (lambda *args: None)
        self.is_classic_group = is_classic_group
        self.groups: dict[str, ShareGroup] = {}
        self.configs: dict[str, dict[str, str]] = {}     # per-group overrides, also for groups not yet joined
        # Share-partition states replayed from the store, put back when each is first used.
        self._replayed: dict[tuple[str, str, int], dict] = {}
        if store is not None:
            self._replayed, self.configs = store.load()
            for group_id, _topic, _partition in self._replayed:
                self.groups.setdefault(group_id, ShareGroup(group_id, GroupConfig(self.configs.get(group_id))))

    # -- groups and members -------------------------------------------------------------------

    def group(self, group_id: str, create: bool = False) -> ShareGroup:
        group = self.groups.get(group_id)
        if group is None:
            if not create:
                raise ShareError(ErrorCode.GROUP_ID_NOT_FOUND, f"share group {group_id!r} does not exist")
            if self.is_classic_group(group_id):
                raise ShareError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                                 f"group {group_id!r} is a classic consumer group, not a share group")
            group = self.groups[group_id] = ShareGroup(group_id, GroupConfig(self.configs.get(group_id)))
        return group

    def heartbeat(self, group_id: str, member_id: str, member_epoch: int, subscription: list[str] | None,
                  client_id: str = "", client_host: str = "") -> tuple[ShareMember, dict[str, list[int]] | None]:
        """One ShareGroupHeartbeat: (the member, its new assignment or None if unchanged)."""
        if not group_id:
            raise ShareError(ErrorCode.INVALID_GROUP_ID, "the group id is empty")
        if group_id not in self.groups and member_epoch != JOIN:   # only a join creates a group
            raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {group_id!r}")
        group = self.group(group_id, create=True)
        if member_epoch == LEAVE:
            self._remove(group, member_id)
            return ShareMember(member_id, client_id, client_host, epoch=LEAVE), None
        member = group.members.get(member_id)
        if member_epoch == JOIN:
            if member is None:
                if subscription is None:
                    raise ShareError(ErrorCode.INVALID_REQUEST, "a joining member must name the topics it subscribes to")
                member_id = member_id or _new_member_id()
                member = group.members[member_id] = ShareMember(member_id, client_id, client_host)
                group.epoch += 1
                self._keep_session(group, member_id)
            member.assignment = {}   # a rejoin gets its whole assignment again
        elif member is None:
            raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {group_id!r}")
        elif member_epoch != member.epoch:
            raise ShareError(ErrorCode.FENCED_MEMBER_EPOCH,
                             f"member epoch {member_epoch} is not the current epoch {member.epoch}")
        if subscription is not None:
            member.subscription = sorted(set(subscription))
        self._touch(group, member)
        group.target = self._assign(group)
        target = group.target.get(member.member_id, {})
        if target == member.assignment and member_epoch != JOIN:
            return member, None
        member.assignment = target
        member.epoch += 1
        return member, target

    def _assign(self, group: ShareGroup) -> Assignment:
        topics = self.log_manager.topics
        subscriptions = {m.member_id: set(m.subscription) for m in group.members.values()}
        counts = {name: len(topics[name].partitions) for names in subscriptions.values() for name in names
                  if name in topics}
        return assign(subscriptions, counts, group.target)

    def _touch(self, group: ShareGroup, member: ShareMember) -> None:
        if member.expiry is not None:
            member.expiry.cancel()
        member.expiry = self.clock.after(group.config.int("share.session.timeout.ms"), self._expire,
                                         group.group_id, member.member_id)

    def _expire(self, group_id: str, member_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None and member_id in group.members:
            group.members.pop(member_id)
            group.sessions.pop(member_id, None)
            group.epoch += 1

    def _remove(self, group: ShareGroup, member_id: str) -> None:
        member = group.members.pop(member_id, None)
        if member is None:
            raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {group.group_id!r}")
        if member.expiry is not None:
            member.expiry.cancel()
        group.epoch += 1
        session = group.sessions.get(member_id)
        if session is None:
            self.release(group, member_id)
        else:   # its final acknowledgement may still be on its way
            session.closing = self.clock.after(group.config.int("share.record.lock.duration.ms"),
                                               self._close_departed, group.group_id, member_id, session)

    @staticmethod
    def _keep_session(group: ShareGroup, member_id: str) -> None:
        """A member that left joins again: the session it kept is its own again, not closing."""
        session = group.sessions.get(member_id)
        if session is not None and session.closing is not None:
            session.closing.cancel()
            session.closing = None

    def _close_departed(self, group_id: str, member_id: str, session: ShareSession) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.sessions.get(member_id) is session:
            del group.sessions[member_id]
            self.release(group, member_id)

    def release(self, group: ShareGroup, member_id: str) -> None:
        """The member is done (left, or closed its share session): its acquired records are available again."""
        for (topic, partition), share_partition in group.partitions.items():
            if share_partition.release_member(member_id):
                self.changed(group, topic, partition)

    # -- share sessions -----------------------------------------------------------------------

    def session(self, group_id: str, member_id: str, epoch: int) -> ShareSession | None:
        """Check a ShareFetch/ShareAcknowledge session epoch and step the session. None: closed."""
        group = self.group(group_id)
        if member_id not in group.members and (epoch != CLOSE_SESSION or member_id not in group.sessions):
            raise ShareError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in share group {group_id!r}")
        if epoch == OPEN_SESSION:
            session = group.sessions[member_id] = ShareSession(epoch=1)
            return session
        session = group.sessions.get(member_id)
        if session is None:
            raise ShareError(ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {member_id}")
        if epoch == CLOSE_SESSION:
            if session.closing is not None:
                session.closing.cancel()
            del group.sessions[member_id]
            return None
        if epoch != session.epoch:
            raise ShareError(ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                             f"share session epoch {epoch}, expected {session.epoch}")
        session.epoch += 1
        return session

    # -- share-partitions ---------------------------------------------------------------------

    def share_partition(self, group: ShareGroup, topic: str, partition: int) -> SharePartition:
        key = (topic, partition)
        share_partition = group.partitions.get(key)
        plog = self.log_manager.get_log(topic, partition)
        if share_partition is None:
            config = group.config
            start = plog.log_start_offset if config.get("share.auto.offset.reset") == "earliest" else plog.log_end_offset
            share_partition = group.partitions[key] = SharePartition(
                self.clock, start, lock_duration_ms=config.int("share.record.lock.duration.ms"),
                delivery_count_limit=config.int("share.delivery.count.limit"),
                on_archived=lambda offset, count, why: self._archived(group, topic, partition, offset, count, why),
                on_change=lambda: self.changed(group, topic, partition))
            replayed = self._replayed.pop((group.group_id, topic, partition), None)
            if replayed is not None:
                restore(share_partition, replayed)
        share_partition.reset_to(plog.log_start_offset)
        return share_partition

    def changed(self, group: ShareGroup, topic: str, partition: int, batch: Changes | None = None) -> None:
        """A share-partition's delivery state changed: wake fetches waiting for records, and persist
        it now, or, if a request gathers its changes in ``batch``, when it calls ``persist``."""
        self.wake(topic, partition)
        if batch is not None:
            batch.partitions.add((topic, partition))
        elif self.store is not None:
            self.store.save_partition(group.group_id, topic, partition, group.partitions[(topic, partition)])

    def persist(self, group: ShareGroup, batch: Changes) -> Awaitable[object]:
        """The share-partitions a request changed: one state record each, in one batch, written at
        the call; with acknowledgements among the changes, its fsync (the broker's group commit, off
        the event loop) starts too. Await the result before answering. ``batch`` is empty after."""
        changed = {key: group.partitions[key] for key in sorted(batch.partitions) if key in group.partitions}
        durable, batch.partitions, batch.acknowledged = batch.acknowledged, set(), False
        if self.store is None or not changed:
            return settled(None)
        return self.store.save_partitions(group.group_id, changed, durable)

    def roll_back(self, group: ShareGroup, undone: list[tuple[tuple[str, int], SharePartition, Undo]]
                  ) -> Awaitable[object]:
        """Acknowledgements whose state write failed: undo them (``SharePartition.roll_back``), on
        share-partitions still in use (not of a topic deleted meanwhile), and write the state they
        are back in, not waited for: the failed write is in the log all the same, and must not be
        the last word on them. Await the result."""
        batch = Changes()
        for (topic, partition), share_partition, undo in undone:
            if group.partitions.get((topic, partition)) is share_partition:
                share_partition.roll_back(undo)
                self.changed(group, topic, partition, batch)
        return self.persist(group, batch)

    def _archived(self, group: ShareGroup, topic: str, partition: int, offset: int, count: int, why: str) -> None:
        if group.config.dead_letter_topic:
            group.partitions[(topic, partition)].dead_lettered += 1
            self.dead_letter(group.group_id, topic, partition, offset, count, why)

    def delete(self, group_id: str) -> ErrorCode:
        """DeleteGroups for a share group: only an empty one, with its delivery state and configs."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        if self.store is not None and not self.store.forget(group_id, list(group.partitions)):
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        self._drop(group, list(group.partitions))
        del self.groups[group_id]
        self.configs.pop(group_id, None)
        return ErrorCode.NONE

    def forget_topic(self, topic: str) -> None:
        """A deleted topic: its share-partitions go, so a topic re-created under the name starts afresh."""
        for group in self.groups.values():
            self._forget(group, {topic})
            for session in group.sessions.values():
                session.partitions = {key for key in session.partitions if key[0] != topic}

    def _forget(self, group: ShareGroup, topics: set[str]) -> bool:
        """Drop the group's share-partitions of ``topics``, once the store has forgotten them."""
        doomed = [key for key in group.partitions if key[0] in topics]
        if doomed and self.store is not None and not self.store.forget(group.group_id, doomed, configs=False):
            return False
        self._drop(group, doomed)
        return True

    @staticmethod
    def _drop(group: ShareGroup, keys: list[tuple[str, int]]) -> None:
        for key in keys:
            share_partition = group.partitions.pop(key)
            share_partition.reset_to(share_partition.end_offset)     # cancels any lock still running

    # -- offsets (kafka-share-groups: DescribeShareGroupOffsets, Alter-, Delete-) --------------

    def states(self, group_id: str) -> dict[tuple[str, int], SharePartition]:
        """Every share-partition of the group with a delivery state (those replayed at start included)."""
        group = self.group(group_id)
        for _, topic, partition in [key for key in self._replayed if key[0] == group_id]:
            if self.log_manager.get_log(topic, partition) is not None:
                self.share_partition(group, topic, partition)
        return group.partitions

    def _empty(self, group_id: str, create: bool) -> ShareGroup:
        group = self.group(group_id, create=create)
        if group.members:
            raise ShareError(ErrorCode.NON_EMPTY_GROUP, f"share group {group_id!r} has members: stop them first")
        return group

    def move_start_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """Set the start offset of share-partitions of an empty group (created if it does not exist, as
        Kafka): each is delivered again from there, with no record in flight."""
        group = self._empty(group_id, create=True)
        for (topic, partition), offset in offsets.items():
            self.share_partition(group, topic, partition).move_to(offset)
            self.changed(group, topic, partition)

    def delete_start_offsets(self, group_id: str, topics: set[str]) -> None:
        """Forget an empty group's delivery state of ``topics``: it starts afresh (share.auto.offset.reset)."""
        self._empty(group_id, create=False)
        self.states(group_id)
        if not self._forget(self.groups[group_id], topics):
            raise ShareError(ErrorCode.KAFKA_STORAGE_ERROR, f"cannot write to the share-group state of {group_id!r}")

    # -- configs ------------------------------------------------------------------------------

    def config_of(self, group_id: str) -> GroupConfig:
        return GroupConfig(self.configs.get(group_id))

    def alter_configs(self, group_id: str, changes: dict[str, str | None], validate_only: bool = False) -> None:
        """Set (a value) or delete (None: back to the default) group configs; ValueError names a bad one."""
        overrides = dict(self.configs.get(group_id, {}))
        for name, value in changes.items():
            if value is None:
                validate(name, DEFAULTS.get(name, ""))
                overrides.pop(name, None)
            else:
                validate(name, value)
                overrides[name] = value
        if validate_only:
            return
        self.configs[group_id] = overrides
        if self.store is not None:
            self.store.save_configs(group_id, overrides)
        group = self.groups.get(group_id)
        if group is not None:
            group.config = GroupConfig(overrides)
            for share_partition in group.partitions.values():
                share_partition.lock_duration_ms = group.config.int("share.record.lock.duration.ms")
                share_partition.delivery_count_limit = group.config.int("share.delivery.count.limit")


def _new_member_id() -> str:
    return uuid.uuid4().hex[:22]

