"""The server-side assignors of consumer groups (KIP-848): pure functions from the members'
subscriptions and the topics' partition counts to each member's target partitions.

``uniform`` (Kafka's default) spreads the partitions so that no two members differ by more
than one partition where their subscriptions let them share, and is sticky: a member keeps
the partitions it had unless the balance needs them elsewhere, so a change moves few
partitions. ``range`` is the range assignor: per topic, each member (in member-id order)
gets a contiguous block, the first members one extra; topics with the same partition count
are therefore co-partitioned (a member gets the same partition numbers of each).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

TopicPartition = tuple[str, int]
Partitions = frozenset[TopicPartition]
# (subscriptions: member -> topics, partition counts: topic -> count, current: member -> partitions) -> target
Assignor = Callable[[Mapping[str, frozenset[str]], Mapping[str, int], Mapping[str, Partitions]],
                    dict[str, Partitions]]


def uniform(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
            current: Mapping[str, Partitions]) -> dict[str, Partitions]:
    members = sorted(subscriptions)
    eligible = {(t, p): [m for m in members if t in subscriptions[m]]
                for t in sorted(partition_counts) for p in range(partition_counts[t])}
    eligible = {tp: ms for tp, ms in eligible.items() if ms}
    owner: dict[TopicPartition, str] = {}
    for member in members:  # stickiness: keep what is still subscribed and not taken
        for tp in sorted(current.get(member, ())):
            if tp in eligible and member in eligible[tp] and tp not in owner:
                owner[tp] = member
    load = {m: 0 for m in members}
    for m in owner.values():
        load[m] += 1
    for tp, candidates in eligible.items():
        if tp not in owner:
            owner[tp] = min(candidates, key=lambda m: (load[m], m))
            load[owner[tp]] += 1
    # Balance: move a partition to an eligible member with at least two fewer, most loaded first.
    # Every move lowers the sum of squared loads, so this ends.
    moved = True
    while moved:
        moved = False
        for tp in sorted(owner, key=lambda tp: (-load[owner[tp]], tp)):
            lightest = min(eligible[tp], key=lambda m: (load[m], m))
            if load[lightest] + 1 < load[owner[tp]]:
                load[owner[tp]] -= 1
                load[lightest] += 1
                owner[tp] = lightest
                moved = True
    return _by_member(members, owner)


def contiguous_range(subscriptions: Mapping[str, frozenset[str]], partition_counts: Mapping[str, int],
                     current: Mapping[str, Partitions]) -> dict[str, Partitions]:
    members = sorted(subscriptions)
    owner: dict[TopicPartition, str] = {}
    for topic in sorted(partition_counts):
        subscribers = [m for m in members if topic in subscriptions[m]]
        if not subscribers:
            continue
        share, extra = divmod(partition_counts[topic], len(subscribers))
        start = 0
        for i, member in enumerate(subscribers):
            size = share + (1 if i < extra else 0)
            owner.update(((topic, p), member) for p in range(start, start + size))
            start += size
    return _by_member(members, owner)


def _by_member(members: list[str], owner: Mapping[TopicPartition, str]) -> dict[str, Partitions]:
    assigned: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for tp, member in owner.items():
        assigned[member].add(tp)
    return {m: frozenset(tps) for m, tps in assigned.items()}


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": contiguous_range}
DEFAULT_ASSIGNOR = "uniform"   # group.consumer.assignors: the first is the default
