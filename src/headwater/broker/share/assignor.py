"""The share-group assignor: which partitions each member fetches from, by Kafka's rule for
share groups (its ``simple`` assignor).

A share-partition hands each record to one member at a time, so members may share a
partition; they share one only when there are more members than partitions:

- each partition goes to ``ceil(members / partitions)`` members (its sharing), so with
  fewer members than partitions each partition has exactly one member, and with more
  every member still gets one;
- the ``sharing x partitions`` assignments are split over the members as evenly as can
  be (two members' counts differ by at most one);
- a member keeps what it has where balance allows (stickiness comes after balance), so a
  member joining or leaving moves few partitions.

When every member subscribes to the same topics their partitions are pooled; otherwise
each topic is spread over the members subscribed to it, on its own.
A pure function of the subscriptions, the topics' partition counts and the current
assignment: tested with tables of cases.
"""
from __future__ import annotations

from collections.abc import Mapping

TopicPartition = tuple[str, int]
Assignment = dict[str, dict[str, list[int]]]      # member -> topic -> partitions


def assign(subscriptions: Mapping[str, set[str]], partition_counts: Mapping[str, int],
           current: Mapping[str, Mapping[str, list[int]]]) -> Assignment:
    """The target assignment of every member. ``subscriptions``: member -> topics;
    ``partition_counts``: topic -> partitions (topics that do not exist are left out);
    ``current``: member -> topic -> partitions as assigned now."""
    held = {member: {(topic, p) for topic, ps in current.get(member, {}).items() for p in ps}
            for member in subscriptions}
    target: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    topic_sets = {frozenset(topics) for topics in subscriptions.values()}
    if len(topic_sets) == 1:
        groups = [(sorted(subscriptions), sorted(next(iter(topic_sets))))]
    else:
        groups = [(sorted(m for m, topics in subscriptions.items() if topic in topics), [topic])
                  for topic in sorted(set().union(*topic_sets))]
    for members, topics in groups:
        partitions = [(t, p) for t in topics for p in range(partition_counts.get(t, 0))]
        for member, got in _spread(members, partitions, held).items():
            target[member] |= got
    return {member: _by_topic(tps) for member, tps in target.items()}


def _spread(members: list[str], partitions: list[TopicPartition],
            held: Mapping[str, set[TopicPartition]]) -> dict[str, set[TopicPartition]]:
    """Spread ``partitions`` over ``members`` (sorted), keeping what each holds where balance allows."""
    if not members or not partitions:
        return {}
    sharing = -(-len(members) // len(partitions))
    total = sharing * len(partitions)
    # Member i's quota: the i-th step of an even split of ``total``, so quotas differ by at most one.
    quota = {m: -(-total * (i + 1) // len(members)) - -(-total * i // len(members)) for i, m in enumerate(members)}
    wanted = set(partitions)
    got = {m: sorted(held.get(m, set()) & wanted) for m in members}
    holders: dict[TopicPartition, list[str]] = {tp: [] for tp in partitions}
    for m in members:
        for tp in got[m]:
            holders[tp].append(m)
    # A partition held by more members than its sharing: those with the most partitions give it up first.
    for tp in partitions:
        while len(holders[tp]) > sharing:
            m = max(holders[tp], key=lambda x: (len(got[x]) - quota[x], x))
            holders[tp].remove(m)
            got[m].remove(tp)
    # A member over its quota gives up its highest partitions.
    for m in members:
        while len(got[m]) > quota[m]:
            holders[got[m].pop()].remove(m)
    # Partitions short of their sharing go to the members furthest below their quota.
    for tp in partitions:
        while len(holders[tp]) < sharing:
            takers = [m for m in members if len(got[m]) < quota[m] and m not in holders[tp]]
            if not takers:    # every member with room already has it: a slight imbalance, as Kafka accepts
                break
            m = min(takers, key=lambda x: (len(got[x]) - quota[x], members.index(x)))
            holders[tp].append(m)
            got[m].append(tp)
    return {m: set(tps) for m, tps in got.items()}


def _by_topic(partitions: set[TopicPartition]) -> dict[str, list[int]]:
    assignment: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        assignment.setdefault(topic, []).append(partition)
    return assignment
