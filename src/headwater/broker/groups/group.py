"""A consumer group and its members: the data the coordinator's state machine works on."""
from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

from headwater.broker.clock import Timer
from headwater.protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE, subscribed_topics


class GroupState(str, Enum):
    """Kafka's names, as DescribeGroups and ListGroups report them."""
    EMPTY = "Empty"                                   # no members (offsets may still be kept)
    PREPARING_REBALANCE = "PreparingRebalance"        # waiting for the members to (re)join
    COMPLETING_REBALANCE = "CompletingRebalance"      # joined; waiting for the leader's assignment
    STABLE = "Stable"                                 # assignment handed out, members consuming
    DEAD = "Dead"                                     # deleted


# The classic protocol's state diagram, drawn in Group.transition: state -> the states it may move to.
TRANSITIONS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE, GroupState.DEAD}),
    GroupState.PREPARING_REBALANCE: frozenset({GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.STABLE, GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.DEAD: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A coordinator bug: a group asked to move along an edge its state diagram does not have."""


@dataclass
class CommittedOffset:
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp: int = -1


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes      # subscription in the group's protocol; empty unless the group is Stable
    assignment: bytes    # empty unless the group is Stable


@dataclass(frozen=True)
class GroupDescription:
    """A group as DescribeGroups and ListGroups report it."""
    group_id: str
    state: GroupState
    protocol_type: str
    protocol: str        # empty unless the group is Stable
    members: tuple[MemberDescription, ...]


@dataclass(eq=False)
class Member:
    member_id: str
    instance_id: str | None          # group.instance.id of a static member
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: list[tuple[str, bytes]]   # (protocol name, subscription metadata), in preference order
    assignment: bytes = b""
    join_waiter: asyncio.Future | None = None   # set while a JoinGroup waits for the rebalance
    sync_waiter: asyncio.Future | None = None   # set while a SyncGroup waits for the leader
    session_timer: Timer | None = None

    def metadata(self, protocol: str) -> bytes:
        return next(meta for name, meta in self.protocols if name == protocol)

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return [(n, bytes(m)) for n, m in self.protocols] == [(n, bytes(m)) for n, m in protocols]


@dataclass(eq=False)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    members: dict[str, Member] = field(default_factory=dict)     # in join order
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    pending_members: dict[str, Timer] = field(default_factory=dict)  # ids handed out, not joined yet
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    # the last commit appended to each partition whose fsync has not finished (Kafka's pending
    # offset commits): an OffsetDelete drops it, so that it does not come back once durable
    pending_offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    rebalance_timer: Timer | None = None
    # group.initial.rebalance.delay.ms: the first rebalance out of Empty waits for more members
    # (it completes only at its timer, not once all have joined) and waits longer while they come
    initial_join_delayed: bool = False
    new_member_added: bool = False   # since the delay was last set

    def transition(self, to: GroupState) -> None:
        """Move to state ``to``; IllegalTransition unless the diagram has that edge.

            Empty --first join--> PreparingRebalance
            PreparingRebalance --all rejoined, or the rebalance timeout--> CompletingRebalance
                (out of Empty: when group.initial.rebalance.delay.ms has passed with no member joining)
            PreparingRebalance --nobody rejoined--> Empty
            CompletingRebalance --leader's assignment stored--> Stable
            CompletingRebalance --join, leave, expiry, unusable assignment--> PreparingRebalance
            Stable --join, leave, expiry, changed subscription--> PreparingRebalance
            Empty --DeleteGroups--> Dead
        """
        if to not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"group {self.group_id!r}: no transition from {self.state.value} to {to.value}")
        self.state = to

    def supports(self, protocol_type: str, protocol_names: list[str]) -> bool:
        """Whether a member with these protocols may join: the first member sets the type; later
        ones must share it and at least one protocol every current member supports."""
        if not protocol_type or not protocol_names:
            return False
        if not self.members:
            return True
        return protocol_type == self.protocol_type and bool(self.common_protocols() & set(protocol_names))

    def common_protocols(self) -> set[str]:
        names = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*names) if names else set()

    def select_protocol(self) -> str:
        """Each member votes for its most preferred protocol that all members support; the most
        votes win, ties going to the leader's preference."""
        common = self.common_protocols()
        votes = Counter(next(name for name, _ in m.protocols if name in common) for m in self.members.values())
        leader = self.members.get(self.leader) or next(iter(self.members.values()))
        order = [name for name, _ in leader.protocols if name in common]
        return max(order, key=lambda name: (votes[name], -order.index(name)))

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_waiter is not None for m in self.members.values())

    def subscribed_topics(self) -> set[str]:
        """The topics the members of a consumer-protocol group subscribe to."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return set()
        return {topic for m in self.members.values() for _, meta in m.protocols for topic in subscribed_topics(meta)}

    def describe(self) -> GroupDescription:
        """As Kafka describes a group: the protocol and each member's subscription and assignment only once Stable."""
        stable = self.state is GroupState.STABLE
        members = tuple(MemberDescription(m.member_id, m.instance_id, m.client_id, m.client_host,
                                          m.metadata(self.protocol) if stable else b"",
                                          m.assignment if stable else b"")
                        for m in self.members.values())
        return GroupDescription(self.group_id, self.state, self.protocol_type or "", self.protocol if stable else "",
                                members)

    def fenced(self, member_id: str, instance_id: str | None) -> bool:
        """A static member's id was replaced by a newer join with the same group.instance.id."""
        return instance_id is not None and self.static_members.get(instance_id, member_id) != member_id
