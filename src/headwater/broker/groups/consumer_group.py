"""Consumer groups with the broker as the assignor: KIP-848's consumer group protocol, a state machine.

A member heartbeats (ConsumerGroupHeartbeat) with its member epoch, its subscription when it
changed, and the partitions it owns when it reconciled. The group has a **group epoch**,
bumped when membership, a subscription, or the subscribed topics' partition counts change;
a **target assignment**, computed by the group's server-side assignor (``assignors``) for
the group epoch it was computed at (the assignment epoch); and each member reconciles
towards its target one heartbeat at a time:

    stable --target moved, partitions to give up--> unrevoked_partitions (epoch kept)
    unrevoked_partitions --heartbeat owning none of them--> (revoked; advance as below)
    stable --target moved, nothing to give up--> epoch := assignment epoch; takes the
           partitions no other member still owns, waits for the rest in unreleased_partitions
    unreleased_partitions --heartbeat, partitions freed--> stable

So no partition is ever owned by two members: a partition moves only after its previous
owner has acknowledged giving it up (or was fenced). A member that misses its session timeout
(or its rebalance timeout while revoking) is fenced: removed, its partitions freed.
MemberEpoch -1 leaves; -2 leaves as a static member, whose assignment waits for the same
``group.instance.id`` to rejoin until the session timeout.

Membership is durable, as Kafka's: every change of a group or member is written through the
``Store`` given (``consumer_group_store``: records in ``__consumer_offsets``) within the step,
its fsync (``--flush always``) awaited before the heartbeat is answered (``answer``; the step
itself stays synchronous), and replayed at start. A restored member gets one session timeout to
heartbeat again and then goes on with the same epoch and assignment; one that does not is
fenced as usual. Time comes from the ``Clock`` given, so tests drive it step by step.
"""
from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from headwater.broker.clock import Clock, Timer
from headwater.protocol.errors import ErrorCode

from .assignors import ASSIGNORS, DEFAULT_ASSIGNOR, Partitions

log = logging.getLogger("headwater.groups")

JOIN, LEAVE, LEAVE_STATIC = 0, -1, -2   # the MemberEpoch values with a meaning of their own
HEARTBEAT_INTERVAL_MS = 5000             # group.consumer.heartbeat.interval.ms
SESSION_TIMEOUT_MS = 45000               # group.consumer.session.timeout.ms
NO_PARTITIONS: Partitions = frozenset()


class ConsumerGroupError(Exception):
    """A heartbeat refused with a Kafka error code; the message goes into ErrorMessage."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(message)
        self.code = code


class GroupState(str, Enum):
    """Kafka's names, as ConsumerGroupDescribe and ListGroups report them."""
    EMPTY = "Empty"
    ASSIGNING = "Assigning"       # the group epoch moved past the target assignment's
    RECONCILING = "Reconciling"   # some member has not reached the target yet
    STABLE = "Stable"


class MemberState(str, Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"   # must give up partitions before moving on
    UNRELEASED_PARTITIONS = "unreleased_partitions"  # waits for partitions other members still own


@dataclass
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat, topics by name; None fields did not change since the last heartbeat."""
    group_id: str
    member_id: str
    member_epoch: int
    client_id: str = ""
    client_host: str = ""
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None     # "" (librdkafka's "no regex") counts as none
    server_assignor: str | None = None
    owned: Partitions | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    member_id: str
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Partitions | None    # None: unchanged since the member last heard it
    synced: Awaitable[ErrorCode] | None = field(default=None, compare=False)  # the step's write's fsync


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    rack_id: str | None = None
    subscribed_names: frozenset[str] = frozenset()
    subscribed_regex: re.Pattern | None = None
    server_assignor: str | None = None
    epoch: int = 0
    previous_epoch: int = -1
    state: MemberState = MemberState.STABLE
    assigned: Partitions = NO_PARTITIONS    # owned and usable
    revoking: Partitions = NO_PARTITIONS    # still owned, being given up
    left_static: bool = False               # left with epoch -2, waiting for its instance id to return
    session_timer: Timer | None = None
    revocation_timer: Timer | None = None

    def subscribed(self, topics: Mapping[str, int]) -> frozenset[str]:
        regex = self.subscribed_regex
        matched = {t for t in topics if regex.fullmatch(t)} if regex is not None else set()
        return frozenset((self.subscribed_names & topics.keys()) | matched)


@dataclass(eq=False)
class ConsumerGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)     # group.instance.id -> member id
    target: dict[str, Partitions] = field(default_factory=dict)      # member id -> target partitions
    partition_counts: dict[str, int] = field(default_factory=dict)   # subscribed topics -> partitions
    owners: dict[tuple[str, int], str] = field(default_factory=dict)  # partition -> member owning it

    @property
    def state(self) -> GroupState:
        if not self.members:
            return GroupState.EMPTY
        if self.assignment_epoch != self.epoch:
            return GroupState.ASSIGNING
        if any(m.epoch != self.assignment_epoch or m.state is not MemberState.STABLE for m in self.members.values()):
            return GroupState.RECONCILING
        return GroupState.STABLE

    def bump(self) -> None:
        """Something the assignor looks at changed: the group epoch moves past the target's (once)."""
        self.epoch = max(self.epoch, self.assignment_epoch + 1)

    @property
    def assignor(self) -> str:
        """The assignor most members ask for; the default when none asks."""
        asked = Counter(m.server_assignor for m in self.members.values() if m.server_assignor)
        return asked.most_common(1)[0][0] if asked else DEFAULT_ASSIGNOR


# A write: the append's error, and its fsync to await (None: nothing to wait for)
Saved = tuple[ErrorCode, Awaitable[ErrorCode] | None]


class Store(Protocol):
    """Where the groups are kept (``consumer_group_store.ConsumerGroupStore``)."""

    def load(self) -> dict[str, ConsumerGroup]: ...

    def save(self, group: ConsumerGroup, member_ids: Iterable[str]) -> Saved:
        """The group's record, the given members' and tombstones for members gone, where changed."""

    def delete(self, group_id: str) -> ErrorCode: ...


class ConsumerGroupCoordinator:
    def __init__(self, clock: Clock, store: Store, topics: Callable[[], Mapping[str, int]],
                 taken: Callable[[str], bool], session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS, max_size: int | None = None):
        """``topics()``: the topics members may subscribe to, with their partition counts;
        ``taken(group_id)``: whether the id is a live group of another kind (classic with members, share)."""
        self.clock, self.store, self.topics, self.taken = clock, store, topics, taken
        self.session_timeout_ms, self.heartbeat_interval_ms = session_timeout_ms, heartbeat_interval_ms
        self.max_size = max_size                  # group.consumer.max.size; None: unbounded
        self.groups: dict[str, ConsumerGroup] = store.load()
        for group in self.groups.values():
            for member in group.members.values():   # as Kafka's coordinator does when it loads a group
                self._arm_session(group, member)
                if member.state is MemberState.UNREVOKED_PARTITIONS:
                    self._arm_revocation(group, member)
        log.info("loaded %d consumer group(s) from __consumer_offsets", len(self.groups))

    # --- ConsumerGroupHeartbeat ---------------------------------------------------------------

    async def answer(self, req: HeartbeatRequest) -> HeartbeatResult:
        """``heartbeat``, returned once what it wrote is durable: under ``--flush always`` its fsync
        runs in the broker's group commit, off the event loop, while other requests are served.
        Raises ConsumerGroupError for a heartbeat refused, or whose write's fsync failed."""
        result = self.heartbeat(req)
        if result.synced is not None:
            error = await asyncio.shield(result.synced)   # shared by the heartbeats waiting for it
            if error:
                raise _not_written(req.group_id, error)
        return result

    def heartbeat(self, req: HeartbeatRequest) -> HeartbeatResult:
        """One step; raises ConsumerGroupError for a heartbeat refused. What it wrote is appended,
        its fsync (``synced``) to be awaited before the answer."""
        regex = _validate(req)
        if req.member_epoch in (LEAVE, LEAVE_STATIC):
            return self._leave(req)
        group = self._group(req.group_id, create=req.member_epoch == JOIN)
        member = self._member(group, req)
        member.left_static = False
        if self._update(member, req, regex):
            group.bump()
        topics = self.topics()
        counts = {t: topics[t] for m in group.members.values() for t in m.subscribed(topics)}
        if counts != group.partition_counts:
            group.partition_counts = counts
            group.bump()
        assigned = group.epoch != group.assignment_epoch
        if assigned:
            self._assign(group)
        before = (member.epoch, member.assigned)
        # A member (re)joining owns nothing: whatever it still had to give up is given up.
        self._reconcile(group, member, NO_PARTITIONS if req.member_epoch == JOIN else req.owned)
        self._arm_session(group, member)
        synced = self._save(group, group.members if assigned else (member.member_id,))
        changed = before != (member.epoch, member.assigned) or req.member_epoch != member.epoch
        stale = req.owned is not None and req.owned != member.assigned
        return HeartbeatResult(member.member_id, member.epoch, self.heartbeat_interval_ms,
                               member.assigned if changed or stale else None, synced)

    def _group(self, group_id: str, create: bool) -> ConsumerGroup:
        if self.taken(group_id):
            raise ConsumerGroupError(ErrorCode.GROUP_ID_NOT_FOUND, f"group {group_id!r} is not a consumer group")
        group = self.groups.get(group_id)
        if group is None:
            if not create:  # e.g. members of a group this broker forgot in a restart: they rejoin
                raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID, f"consumer group {group_id!r} has no members")
            group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _member(self, group: ConsumerGroup, req: HeartbeatRequest) -> Member:
        """The heartbeating member: created, taken over (static) or checked against its epoch."""
        member = group.members.get(req.member_id)
        if req.member_epoch == JOIN:
            if req.instance_id is not None:
                return self._join_static(group, req, member)
            return member or self._add(group, req, req.member_id or str(uuid.uuid4()))
        if req.instance_id is not None and group.static_members.get(req.instance_id, req.member_id) != req.member_id:
            raise ConsumerGroupError(ErrorCode.FENCED_INSTANCE_ID,
                                     f"instance {req.instance_id!r} now belongs to another member")
        if member is None:
            raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"member {req.member_id!r} is not in group {group.group_id!r}")
        if req.member_epoch > member.epoch or (req.member_epoch < member.epoch and not (
                req.member_epoch == member.previous_epoch and (req.owned or NO_PARTITIONS) <= member.assigned)):
            raise ConsumerGroupError(ErrorCode.FENCED_MEMBER_EPOCH,
                                     f"member epoch {req.member_epoch}, the group has it at {member.epoch}")
        return member

    def _join_static(self, group: ConsumerGroup, req: HeartbeatRequest, member: Member | None) -> Member:
        previous_id = group.static_members.get(req.instance_id)
        previous = group.members.get(previous_id) if previous_id else None
        if previous is None or previous is member:
            return member or self._add(group, req, req.member_id or str(uuid.uuid4()))
        if not previous.left_static:
            raise ConsumerGroupError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                     f"instance {req.instance_id!r} is still held by member {previous_id!r}")
        # The same instance back: it takes over the old member's place, epoch and partitions.
        new_id = req.member_id or str(uuid.uuid4())
        self._cancel_timers(previous)
        del group.members[previous_id]
        previous.member_id, previous.left_static = new_id, False
        previous.client_id, previous.client_host = req.client_id, req.client_host
        group.members[new_id] = previous
        group.static_members[req.instance_id] = new_id
        group.target[new_id] = group.target.pop(previous_id, NO_PARTITIONS)
        for tp in previous.assigned | previous.revoking:
            group.owners[tp] = new_id
        log.info("consumer group %r: static member %r rejoined as %r", group.group_id, req.instance_id, new_id)
        return previous

    def _add(self, group: ConsumerGroup, req: HeartbeatRequest, member_id: str) -> Member:
        if self.max_size is not None and len(group.members) >= self.max_size:
            raise ConsumerGroupError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                                     f"group {group.group_id!r} has reached its maximum size of {self.max_size}")
        member = group.members[member_id] = Member(member_id, req.instance_id, req.client_id, req.client_host,
                                                   req.rebalance_timeout_ms)
        if req.instance_id is not None:
            group.static_members[req.instance_id] = member_id
        group.bump()
        log.info("consumer group %r: member %r joins (group epoch %d)", group.group_id, member_id, group.epoch)
        return member

    @staticmethod
    def _update(member: Member, req: HeartbeatRequest, regex: re.Pattern | None) -> bool:
        """Take the fields the heartbeat carries; whether the subscription changed."""
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        before = (member.subscribed_names, member.subscribed_regex, member.server_assignor)
        if req.subscribed_topic_names is not None:
            member.subscribed_names = frozenset(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            member.subscribed_regex = regex
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        return before != (member.subscribed_names, member.subscribed_regex, member.server_assignor)

    def _assign(self, group: ConsumerGroup) -> None:
        subscriptions = {m.member_id: m.subscribed(group.partition_counts) for m in group.members.values()}
        group.target = ASSIGNORS[group.assignor](subscriptions, group.partition_counts, group.target)
        group.assignment_epoch = group.epoch
        log.info("consumer group %r: target assignment at epoch %d by %r", group.group_id, group.epoch,
                 group.assignor)

    # --- reconciliation ------------------------------------------------------------------

    def _reconcile(self, group: ConsumerGroup, member: Member, owned: Partitions | None) -> None:
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            if owned is None or owned & member.revoking:
                return  # not acknowledged yet
            self._release(group, member.revoking)
            member.revoking = NO_PARTITIONS
            if member.revocation_timer is not None:
                member.revocation_timer.cancel()
                member.revocation_timer = None
            member.state = MemberState.STABLE
        if member.epoch == group.assignment_epoch and member.state is MemberState.STABLE:
            return
        target = group.target.get(member.member_id, NO_PARTITIONS)
        revoke = member.assigned - target
        if revoke:
            member.assigned -= revoke
            member.revoking, member.state = revoke, MemberState.UNREVOKED_PARTITIONS
            self._arm_revocation(group, member)
            return
        free = frozenset(tp for tp in target - member.assigned if tp not in group.owners)
        group.owners.update((tp, member.member_id) for tp in free)
        member.assigned |= free
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        member.state = MemberState.STABLE if member.assigned == target else MemberState.UNRELEASED_PARTITIONS

    @staticmethod
    def _release(group: ConsumerGroup, partitions: Partitions) -> None:
        for tp in partitions:
            group.owners.pop(tp, None)

    # --- leaving and fencing ------------------------------------------------------------------

    def _leave(self, req: HeartbeatRequest) -> HeartbeatResult:
        group = self._group(req.group_id, create=False)
        member = group.members.get(req.member_id)
        if member is None and req.instance_id is not None:
            member = group.members.get(group.static_members.get(req.instance_id, ""))
        if member is None:
            raise ConsumerGroupError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"member {req.member_id!r} is not in group {group.group_id!r}")
        if req.member_epoch == LEAVE_STATIC:
            member.left_static = True  # keeps its partitions until it rejoins or its session ends
            log.info("consumer group %r: static member %r leaves for now", group.group_id, member.instance_id)
            synced = self._save(group, (member.member_id,))
        else:
            log.info("consumer group %r: member %r leaves", group.group_id, member.member_id)
            self._remove(group, member)
            synced = self._save(group, ())
        return HeartbeatResult(member.member_id, req.member_epoch, 0, None, synced)

    def _session_expired(self, group: ConsumerGroup, member: Member) -> None:
        if group.members.get(member.member_id) is member:
            log.info("consumer group %r: member %r fenced after %d ms without a heartbeat", group.group_id,
                     member.member_id, self.session_timeout_ms)
            self._remove(group, member)
            # No one to answer: the fsync is not awaited. A failed write is logged (append or fsync),
            # and written again at the group's next change.
            self.store.save(group, ())

    def _revocation_expired(self, group: ConsumerGroup, member: Member) -> None:
        if group.members.get(member.member_id) is member and member.state is MemberState.UNREVOKED_PARTITIONS:
            log.info("consumer group %r: member %r fenced: did not revoke %s within %d ms", group.group_id,
                     member.member_id, sorted(member.revoking), member.rebalance_timeout_ms)
            self._remove(group, member)
            self.store.save(group, ())

    def _remove(self, group: ConsumerGroup, member: Member) -> None:
        self._cancel_timers(member)
        del group.members[member.member_id]
        group.target.pop(member.member_id, None)
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        self._release(group, member.assigned | member.revoking)
        group.bump()

    @staticmethod
    def _cancel_timers(member: Member) -> None:
        for timer in (member.session_timer, member.revocation_timer):
            if timer is not None:
                timer.cancel()
        member.session_timer = member.revocation_timer = None

    def _arm_session(self, group: ConsumerGroup, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.clock.after(self.session_timeout_ms, self._session_expired, group, member)

    def _arm_revocation(self, group: ConsumerGroup, member: Member) -> None:
        member.revocation_timer = self.clock.after(member.rebalance_timeout_ms, self._revocation_expired,
                                                   group, member)

    def _save(self, group: ConsumerGroup, member_ids: Iterable[str]) -> Awaitable[ErrorCode] | None:
        """Write the change within the step; its fsync to await before the answer. A write refused is
        the heartbeat's error (the client retries; the records not written are written at the
        group's next change)."""
        error, synced = self.store.save(group, member_ids)
        if error:
            raise _not_written(group.group_id, error)
        return synced

    # --- offsets and administration ------------------------------------------------------------

    def check_commit(self, group_id: str, member_id: str, member_epoch: int) -> ErrorCode | None:
        """An OffsetCommit's member check for a consumer group (None: not one, the classic rules apply)."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        if member_epoch < 0 and not group.members:
            return ErrorCode.NONE   # an admin or a consumer without group management
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return ErrorCode.NONE if member_epoch == member.epoch else ErrorCode.STALE_MEMBER_EPOCH

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topics the members of a consumer group subscribe to (OffsetDelete keeps their offsets)."""
        group = self.groups.get(group_id)
        topics = self.topics()
        return {t for m in group.members.values() for t in m.subscribed(topics)} if group is not None else set()

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    def delete(self, group_id: str) -> ErrorCode:
        """Forget an empty consumer group (DeleteGroups, or a classic group taking the id)."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.members:
            return ErrorCode.NON_EMPTY_GROUP
        error = self.store.delete(group_id)
        if not error:
            del self.groups[group_id]
        return error


def _not_written(group_id: str, error: ErrorCode) -> ConsumerGroupError:
    return ConsumerGroupError(error, f"cannot write consumer group {group_id!r}: {error.name}")


def _validate(req: HeartbeatRequest) -> re.Pattern | None:
    """Kafka's request checks; the compiled regex of the subscription, if it has one."""
    def invalid(message: str) -> ConsumerGroupError:
        return ConsumerGroupError(ErrorCode.INVALID_REQUEST, message)
    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.member_epoch == JOIN:
        if req.rebalance_timeout_ms <= 0:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if req.owned:
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if req.subscribed_topic_names is None and not req.subscribed_topic_regex:
            raise invalid("SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif req.member_epoch == LEAVE_STATIC:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null when leaving as a static member.")
    elif req.member_epoch < LEAVE_STATIC:
        raise invalid(f"MemberEpoch {req.member_epoch} is not valid.")
    if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
        raise ConsumerGroupError(ErrorCode.UNSUPPORTED_ASSIGNOR,
                                 f"ServerAssignor {req.server_assignor!r} is not supported; "
                                 f"the broker has {sorted(ASSIGNORS)}")
    if not req.subscribed_topic_regex:
        return None
    try:
        return re.compile(req.subscribed_topic_regex)
    except re.error as exc:
        raise ConsumerGroupError(ErrorCode.INVALID_REGULAR_EXPRESSION,
                                 f"SubscribedTopicRegex {req.subscribed_topic_regex!r} is invalid: {exc}") from None
