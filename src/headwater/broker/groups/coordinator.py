"""The group coordinator: the classic group protocol's state machine.

A group's states and the edges between them (Empty, PreparingRebalance, CompletingRebalance,
Stable, Dead) are drawn in ``Group.transition``, the one place a group changes state.

A rebalance opens a new generation. JoinGroup answers wait (a future the handler awaits)
until every known member has rejoined or the rebalance timeout has passed; members that
did not rejoin are dropped. The first rebalance of an Empty group waits
group.initial.rebalance.delay.ms, again each time a new member joined meanwhile, within the
rebalance timeout, as Kafka's does: consumers that start together land in one generation. The leader (first member to join) receives everyone's
subscription and sends the assignment back in its SyncGroup, which the coordinator hands
to each member. Members that stop heartbeating for their session timeout are removed by a
timer, which starts the next rebalance; so do LeaveGroup and a changed subscription.
Static members (group.instance.id) keep their place across restarts: a rejoin with the same
instance id takes over the old member id without a rebalance, and the old id is fenced.

The coordinator does no I/O of its own: it writes through the ``GroupStore`` and keeps time
with the ``Clock`` it is given, so tests drive it step by step with a clock moved by hand.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from dataclasses import dataclass, field
from typing import TypeVar

from headwater.broker.clock import Clock
from headwater.protocol.errors import ErrorCode

from . import assignment
from .group import CommittedOffset, Group, GroupDescription, GroupState, Member
from .store import GroupStore

log = logging.getLogger("headwater.groups")

# group.min.session.timeout.ms / group.max.session.timeout.ms, Kafka's defaults
MIN_SESSION_TIMEOUT_MS = 6000
MAX_SESSION_TIMEOUT_MS = 1_800_000
OFFSET_METADATA_MAX_BYTES = 4096  # offset.metadata.max.bytes
CONSUMER_PROTOCOL = "consumer"

Answer = TypeVar("Answer")
SyncResult = tuple[ErrorCode, bytes]   # the error and this member's assignment
Empty, Preparing, Completing, Stable, Dead = (GroupState.EMPTY, GroupState.PREPARING_REBALANCE,
                                               GroupState.COMPLETING_REBALANCE, GroupState.STABLE, GroupState.DEAD)


@dataclass
class JoinRequest:
    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool   # JoinGroup v4+: a new member first gets its id, then joins with it


@dataclass
class JoinResult:
    error: ErrorCode
    member_id: str = ""
    generation: int = -1
    protocol: str | None = None
    leader: str = ""
    members: list[Member] = field(default_factory=list)   # for the leader only


class GroupCoordinator:
    def __init__(self, store: GroupStore, clock: Clock, initial_rebalance_delay_ms: int):
        self.store, self.clock = store, clock
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms   # group.initial.rebalance.delay.ms
        self._groups: dict[str, Group] = store.load()
        for group in self._groups.values():
            for member in group.members.values():  # restored members get one session to come back
                self._arm_session(group, member)
        log.info("loaded %d group(s) from %s", len(self._groups), "__consumer_offsets")

    # --- JoinGroup -------------------------------------------------------------------------

    def join(self, req: JoinRequest) -> asyncio.Future[JoinResult]:
        """The answer to a JoinGroup: done at once for errors and retries, else when the rebalance completes."""
        return self._future(self._join(req))

    def _join(self, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if not req.group_id:
            return JoinResult(ErrorCode.INVALID_GROUP_ID, req.member_id)
        if not MIN_SESSION_TIMEOUT_MS <= req.session_timeout_ms <= MAX_SESSION_TIMEOUT_MS:
            return JoinResult(ErrorCode.INVALID_SESSION_TIMEOUT, req.member_id)
        group = self._groups.get(req.group_id)
        if group is None:
            if req.member_id:
                return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
            group = Group(req.group_id)
        if group.state is Dead:
            return JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, req.member_id)
        if not group.supports(req.protocol_type, [name for name, _ in req.protocols]):
            return JoinResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, req.member_id)
        self._groups.setdefault(group.group_id, group)
        if not req.member_id:
            return self._join_new_member(group, req)
        return self._join_known_member(group, req)

    def _join_new_member(self, group: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        if req.instance_id is not None and req.instance_id in group.static_members:
            return self._replace_static_member(group, req)
        member_id = f"{req.client_id}-{uuid.uuid4()}"
        if req.instance_id is None and req.require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries is not a new member
            group.pending_members[member_id] = self.clock.after(req.session_timeout_ms, self._pending_expired,
                                                                group, member_id)
            return JoinResult(ErrorCode.MEMBER_ID_REQUIRED, member_id)
        return self._add_member_and_wait(group, member_id, req)

    def _join_known_member(self, group: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        timer = group.pending_members.pop(req.member_id, None)
        if timer is not None:
            timer.cancel()
            return self._add_member_and_wait(group, req.member_id, req)
        if group.fenced(req.member_id, req.instance_id):
            return JoinResult(ErrorCode.FENCED_INSTANCE_ID, req.member_id)
        member = group.members.get(req.member_id)
        if member is None:
            return JoinResult(ErrorCode.UNKNOWN_MEMBER_ID, req.member_id)
        unchanged = member.same_protocols(req.protocols)
        if group.state is Completing and unchanged:
            return self._join_result(group, member)  # a retried join: same answer
        if group.state is Stable and unchanged and member.member_id != group.leader:
            return self._join_result(group, member)  # nothing to rebalance for
        member.protocols = req.protocols
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, req.rebalance_timeout_ms
        return self._wait_for_join(group, member)

    def _replace_static_member(self, group: Group, req: JoinRequest) -> JoinResult | asyncio.Future[JoinResult]:
        old = group.members[group.static_members[req.instance_id]]
        new_id = f"{req.instance_id}-{uuid.uuid4()}"
        log.info("group %r: static member %r rejoined, %r replaces %r", group.group_id, req.instance_id, new_id,
                 old.member_id)
        self._cancel_member(old, ErrorCode.FENCED_INSTANCE_ID)
        del group.members[old.member_id]
        old.member_id, old.client_id, old.client_host = new_id, req.client_id, req.client_host
        group.members[new_id] = old
        group.static_members[req.instance_id] = new_id
        if group.leader not in group.members:
            group.leader = new_id
        if group.state is Stable and old.same_protocols(req.protocols):
            self._arm_session(group, old)
            return self._join_result(group, old, with_members=False)  # keeps its assignment: no rebalance
        old.protocols = req.protocols
        return self._wait_for_join(group, old)

    def _add_member_and_wait(self, group: Group, member_id: str, req: JoinRequest) -> asyncio.Future[JoinResult]:
        member = Member(member_id, req.instance_id, req.client_id, req.client_host, req.session_timeout_ms,
                        req.rebalance_timeout_ms, req.protocols)
        if not group.members:
            group.protocol_type = req.protocol_type
        group.members[member_id] = member
        if req.instance_id is not None:
            group.static_members[req.instance_id] = member_id
        if group.leader is None:
            group.leader = member_id
        group.new_member_added = group.initial_join_delayed
        log.info("group %r: member %r joins", group.group_id, member_id)
        return self._wait_for_join(group, member)

    def _wait_for_join(self, group: Group, member: Member) -> asyncio.Future[JoinResult]:
        waiter = member.join_waiter = self.clock.create_future()
        self._arm_session(group, member)
        if group.state is not Preparing:
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)
        return waiter

    def _join_result(self, group: Group, member: Member, with_members: bool = True) -> JoinResult:
        leader = member.member_id == group.leader
        return JoinResult(ErrorCode.NONE, member.member_id, group.generation, group.protocol, group.leader or "",
                          list(group.members.values()) if leader and with_members else [])

    # --- the rebalance ---------------------------------------------------------------------

    def _prepare_rebalance(self, group: Group) -> None:
        if group.state is Completing:
            self._fail_syncs(group, ErrorCode.REBALANCE_IN_PROGRESS)
        initial = group.state is Empty and self.initial_rebalance_delay_ms > 0
        group.transition(Preparing)
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
        if initial:
            group.initial_join_delayed, group.new_member_added = True, False
            delay = self.initial_rebalance_delay_ms
            group.rebalance_timer = self.clock.after(delay, self._initial_delay_passed, group,
                                                     max(group.rebalance_timeout_ms() - delay, 0))
        else:
            group.rebalance_timer = self.clock.after(group.rebalance_timeout_ms(), self._complete_join, group)
        log.info("group %r: preparing rebalance (generation %d)", group.group_id, group.generation)

    def _initial_delay_passed(self, group: Group, remaining_ms: int) -> None:
        """Wait one more delay (at most what is left of the rebalance timeout) if members came meanwhile."""
        if group.new_member_added and remaining_ms > 0:
            group.new_member_added = False
            delay = min(self.initial_rebalance_delay_ms, remaining_ms)
            group.rebalance_timer = self.clock.after(delay, self._initial_delay_passed, group, remaining_ms - delay)
        else:
            self._complete_join(group)

    def _maybe_complete_join(self, group: Group) -> None:
        if group.state is Preparing and not group.initial_join_delayed and group.all_joined():
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Open the next generation with the members that rejoined (at the latest at the rebalance timeout)."""
        if group.rebalance_timer is not None:
            group.rebalance_timer.cancel()
            group.rebalance_timer = None
        if group.state is not Preparing:
            return
        group.initial_join_delayed = False
        for member in [m for m in group.members.values() if m.join_waiter is None]:
            log.info("group %r: member %r did not rejoin in time", group.group_id, member.member_id)
            self._remove(group, member)
        group.generation += 1
        if not group.members:
            group.transition(Empty)
            group.protocol, group.leader = None, None
            self.store.store_group(group)
            log.info("group %r: empty at generation %d", group.group_id, group.generation)
            return
        group.protocol = group.select_protocol()
        group.transition(Completing)
        for member in group.members.values():
            member.assignment = b""
            waiter, member.join_waiter = member.join_waiter, None
            if not waiter.done():
                waiter.set_result(self._join_result(group, member))
            self._arm_session(group, member)
        log.info("group %r: generation %d with %d member(s), protocol %r, leader %r", group.group_id,
                 group.generation, len(group.members), group.protocol, group.leader)

    # --- SyncGroup -------------------------------------------------------------------------

    def sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
             assignments: list[tuple[str, bytes]]) -> asyncio.Future[SyncResult]:
        """The answer to a SyncGroup: done at once unless the member waits for the leader's assignment."""
        return self._future(self._sync(group_id, generation, member_id, instance_id, assignments))

    def _sync(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
              assignments: list[tuple[str, bytes]]) -> SyncResult | asyncio.Future[SyncResult]:
        group = self._groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error:
            return error, b""
        member = group.members[member_id]
        if group.state is Preparing:
            return ErrorCode.REBALANCE_IN_PROGRESS, b""
        self._arm_session(group, member)
        if group.state is Stable:
            return ErrorCode.NONE, member.assignment
        waiter = member.sync_waiter = self.clock.create_future()
        if member_id == group.leader:
            error = self._validate(group, assignments)
            if error:
                log.warning("group %r: leader %r sent an unusable assignment: %s", group.group_id, member_id, error)
                self._fail_syncs(group, ErrorCode.INVALID_REQUEST)
                self._prepare_rebalance(group)
            else:
                self._complete_sync(group, dict(assignments))
        return waiter

    @staticmethod
    def _validate(group: Group, assignments: list[tuple[str, bytes]]) -> str | None:
        seen = set()
        for member_id, data in assignments:
            if member_id not in group.members:
                return f"assignment for {member_id!r}, not a member of generation {group.generation}"
            if member_id in seen:
                return f"two assignments for {member_id!r}"
            seen.add(member_id)
            if group.protocol_type == CONSUMER_PROTOCOL:
                try:
                    assignment.partitions(data)
                except assignment.MalformedAssignment as exc:
                    return f"assignment for {member_id!r}: {exc}"
        return None

    def _complete_sync(self, group: Group, assignments: dict[str, bytes]) -> None:
        for member in group.members.values():
            member.assignment = bytes(assignments.get(member.member_id, b""))
        error = self.store.store_group(group)
        if error:
            self._fail_syncs(group, error)
            self._prepare_rebalance(group)
            return
        group.transition(Stable)
        for member in group.members.values():
            waiter, member.sync_waiter = member.sync_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result((ErrorCode.NONE, member.assignment))
        log.info("group %r: generation %d stable", group.group_id, group.generation)

    def _fail_syncs(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            waiter, member.sync_waiter = member.sync_waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result((error, b""))

    # --- Heartbeat, LeaveGroup, session expiry ---------------------------------------------

    def heartbeat(self, group_id: str, generation: int, member_id: str, instance_id: str | None) -> ErrorCode:
        group = self._groups.get(group_id)
        error = self._check_member(group, member_id, instance_id, generation)
        if error:
            return error
        self._arm_session(group, group.members[member_id])
        return ErrorCode.REBALANCE_IN_PROGRESS if group.state is Preparing else ErrorCode.NONE

    def leave(self, group_id: str, leavers: list[tuple[str, str | None]]) -> list[ErrorCode]:
        """Remove members given as (member id, group.instance.id); one error per leaver."""
        group = self._groups.get(group_id)
        if group is None or group.state is Dead:
            return [ErrorCode.UNKNOWN_MEMBER_ID] * len(leavers)
        errors, removed = [], False
        for member_id, instance_id in leavers:
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != known:
                    errors.append(ErrorCode.FENCED_INSTANCE_ID)
                    continue
                member_id = known
            timer = group.pending_members.pop(member_id, None)
            if timer is not None:
                timer.cancel()
                errors.append(ErrorCode.NONE)
                removed = True
                continue
            member = group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                continue
            log.info("group %r: member %r leaves", group.group_id, member_id)
            self._remove(group, member)
            errors.append(ErrorCode.NONE)
            removed = True
        if removed:
            self._members_changed(group)
        return errors

    def _session_expired(self, group: Group, member: Member) -> None:
        if group.members.get(member.member_id) is not member:
            return
        if member.join_waiter is not None or member.sync_waiter is not None:
            self._arm_session(group, member)  # parked in a rebalance: the rebalance timeout governs
            return
        log.info("group %r: member %r expired after %d ms without a heartbeat", group.group_id, member.member_id,
                 member.session_timeout_ms)
        self._remove(group, member)
        self._members_changed(group)

    def _pending_expired(self, group: Group, member_id: str) -> None:
        if group.pending_members.pop(member_id, None) is not None:
            self._maybe_complete_join(group)

    def _members_changed(self, group: Group) -> None:
        if group.state in (Stable, Completing):
            self._prepare_rebalance(group)
        self._maybe_complete_join(group)

    def _remove(self, group: Group, member: Member) -> None:
        self._cancel_member(member, ErrorCode.UNKNOWN_MEMBER_ID)
        del group.members[member.member_id]
        if member.instance_id is not None and group.static_members.get(member.instance_id) == member.member_id:
            del group.static_members[member.instance_id]
        if group.leader == member.member_id:
            group.leader = next(iter(group.members), None)

    @staticmethod
    def _cancel_member(member: Member, error: ErrorCode) -> None:
        """Stop a member's timer and answer whatever it is parked on."""
        if member.session_timer is not None:
            member.session_timer.cancel()
        for waiter, answer in ((member.join_waiter, JoinResult(error, member.member_id)),
                               (member.sync_waiter, (error, b""))):
            if waiter is not None and not waiter.done():
                waiter.set_result(answer)
        member.join_waiter = member.sync_waiter = None

    def _arm_session(self, group: Group, member: Member) -> None:
        if member.session_timer is not None:
            member.session_timer.cancel()
        member.session_timer = self.clock.after(member.session_timeout_ms, self._session_expired, group, member)

    def _check_member(self, group: Group | None, member_id: str, instance_id: str | None,
                      generation: int) -> ErrorCode:
        """The member checks of SyncGroup, Heartbeat and OffsetCommit, in Kafka's order."""
        if group is None or group.state is Empty:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is Dead:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if group.fenced(member_id, instance_id):
            return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation != group.generation:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    # --- offsets ---------------------------------------------------------------------------

    async def commit(self, group_id: str, generation: int, member_id: str, instance_id: str | None,
                     offsets: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
        """Store offsets for a group member, or for a simple consumer (generation -1, no member
        id) of a group without members. One error for the whole request. Checked and appended at
        the call; answered once durable (under ``--flush always``, after the broker's group commit
        fsynced them, off the event loop), and only then visible: until then OffsetFetch sees the
        offsets as they were, as Kafka's pending offset commits."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0:
                return ErrorCode.ILLEGAL_GENERATION  # a member of a generation this coordinator never had
            group = self._groups[group_id] = Group(group_id)
        if not (generation < 0 and group.state is Empty):  # else a simple consumer: no members to check
            error = self._check_member(group, member_id, instance_id, generation)
            if error:
                return error
            if group.state is Completing:
                return ErrorCode.REBALANCE_IN_PROGRESS  # a member of the new generation, still without its assignment
            self._arm_session(group, group.members[member_id])
        self._stamp(offsets)
        error, fsync = self.store.store_offsets_then_fsync(group.group_id, offsets)
        if error:
            return error
        if fsync is None:   # no fsync of each write (--flush never): visible at once
            group.offsets.update(offsets)
            return ErrorCode.NONE
        # A task, so that the offsets become visible once durable whether or not the client still
        # waits (its handler cancelled as its connection closes). Rounds finish in append order and
        # the waiters of one round resume in the order they joined it (the loop's callbacks run first
        # in, first out), so a group's commits become visible in the order they were appended.
        group.pending_offsets.update(offsets)
        synced = asyncio.ensure_future(fsync)
        synced.add_done_callback(functools.partial(_apply_when_durable, group, offsets))
        return await asyncio.shield(synced)

    def _stamp(self, offsets: dict[tuple[str, int], CommittedOffset]) -> None:
        now = self.clock.now_ms()
        for committed in offsets.values():
            committed.commit_timestamp = now

    def check_transactional_member(self, group_id: str, generation: int, member_id: str,
                                   instance_id: str | None) -> ErrorCode:
        """TxnOffsetCommit's member check (KIP-447); clients before v3 send no member: none is checked."""
        if generation < 0 and not member_id:
            return ErrorCode.NONE
        return self._check_member(self._groups.get(group_id), member_id, instance_id, generation)

    def commit_transactional(self, group_id: str, offsets: dict[tuple[str, int], CommittedOffset]) -> ErrorCode:
        """Offsets of a transaction that has committed: they reach the group now (fsynced on the
        event loop under ``--flush always``: one write per transaction's end, not per commit)."""
        group = self._groups.setdefault(group_id, Group(group_id))
        self._stamp(offsets)
        error = self.store.store_offsets(group_id, offsets)
        if not error:
            group.offsets.update(offsets)
        return error

    def delete_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> tuple[ErrorCode, dict]:
        """OffsetDelete (KIP-496): (the request's error, {partition: error}). A live consumer
        group keeps the offsets of the topics it subscribes to (GROUP_SUBSCRIBED_TO_TOPIC)."""
        group = self._groups.get(group_id)
        if group is None or group.state is Dead:
            return ErrorCode.GROUP_ID_NOT_FOUND, {}
        in_use = group.subscribed_topics()
        errors = {tp: ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in in_use else ErrorCode.NONE for tp in partitions}
        doomed = [tp for tp, error in errors.items() if not error and tp in group.offsets]
        error = self.store.delete_offsets(group_id, doomed)
        if error:
            return error, {}
        for tp in doomed:
            del group.offsets[tp]
            group.pending_offsets.pop(tp, None)
        return ErrorCode.NONE, errors

    def committed(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        group = self._groups.get(group_id)
        return group.offsets if group is not None else {}

    def subscribed_topics(self, group_id: str) -> set[str]:
        group = self._groups.get(group_id)
        return group.subscribed_topics() if group is not None else set()

    # --- administration --------------------------------------------------------------------

    def describe(self, group_id: str) -> GroupDescription:
        """An unknown group is described as Dead, without an error, as Kafka does."""
        group = self._groups.get(group_id)
        return group.describe() if group is not None else Group(group_id, state=Dead).describe()

    def list_groups(self) -> list[GroupDescription]:
        return [group.describe() for group in self._groups.values()]

    def delete(self, group_id: str) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None or group.state is Dead:
            return ErrorCode.GROUP_ID_NOT_FOUND
        if group.state is not Empty or group.pending_members:
            return ErrorCode.NON_EMPTY_GROUP
        error = self.store.delete_group(group)
        if not error:
            group.transition(Dead)
            del self._groups[group_id]
            log.info("group %r deleted", group_id)
        return error

    def _future(self, answer: Answer | asyncio.Future[Answer]) -> asyncio.Future[Answer]:
        """A parked request's future as it is; an answer known at once as a future already done."""
        if isinstance(answer, asyncio.Future):
            return answer
        future = self.clock.create_future()
        future.set_result(answer)
        return future


def _apply_when_durable(group: Group, offsets: dict[tuple[str, int], CommittedOffset],
                        synced: asyncio.Future[ErrorCode]) -> None:
    """A commit's offsets made visible once its fsync succeeded, but those an OffsetDelete has
    dropped since; a failed one's never are (the client is answered the error, and retries)."""
    durable = not (synced.cancelled() or synced.exception() is not None or synced.result())
    for tp, committed in offsets.items():
        if durable and tp in group.pending_offsets:
            group.offsets[tp] = committed
        if group.pending_offsets.get(tp) is committed:
            del group.pending_offsets[tp]
