"""The consumer groups' server-side assignors (KIP-848), as tables of cases checked against
properties computed in plain Python: every subscribed partition assigned exactly once, to a
member subscribed to its topic; uniform balanced within one partition and sticky; range in
contiguous blocks per topic, co-partitioned topics aligned."""
import itertools
import random

import pytest

from headwater.broker.groups.assignors import contiguous_range, uniform

A, B, C, D = "a", "b", "c", "d"


def subs(*pairs):
    """subs((member, "t1,t2"), ...) -> {member: frozenset of topics}"""
    return {m: frozenset(topics.split(",")) for m, topics in pairs}


def check_cover(subscriptions, counts, target):
    """Every partition of a subscribed topic goes to exactly one member subscribed to it."""
    owned = [tp for parts in target.values() for tp in parts]
    assert len(owned) == len(set(owned))
    wanted = {(t, p) for t, n in counts.items() if any(t in s for s in subscriptions.values()) for p in range(n)}
    assert set(owned) == wanted
    for member, parts in target.items():
        assert all(t in subscriptions[member] for t, _ in parts)


HOMOGENEOUS = [  # (members, {topic: partitions})
    ([A], {"t": 3}),
    ([A, B], {"t": 4}),
    ([A, B, C], {"t": 7}),
    ([A, B, C], {"t": 2}),            # more members than partitions
    ([A, B, C], {"t": 5, "u": 5}),
    ([A, B, C, D], {"t": 1, "u": 3, "v": 10}),
]


@pytest.mark.parametrize("members,counts", HOMOGENEOUS)
def test_uniform_balances_within_one(members, counts):
    subscriptions = {m: frozenset(counts) for m in members}
    target = uniform(subscriptions, counts, {})
    check_cover(subscriptions, counts, target)
    sizes = [len(target[m]) for m in members]
    assert max(sizes) - min(sizes) <= 1


HETEROGENEOUS = [  # (subscriptions, counts, the largest spread the subscriptions allow)
    (subs((A, "t"), (B, "t,u")), {"t": 4, "u": 4}, 0),
    (subs((A, "t"), (B, "u")), {"t": 6, "u": 2}, 4),      # nobody can share: each takes its own topic
    (subs((A, "t"), (B, "t,u"), (C, "u")), {"t": 3, "u": 3}, 0),
    (subs((A, "t,x"), (B, "t")), {"t": 2}, 0),               # x does not exist
]


@pytest.mark.parametrize("subscriptions,counts,spread", HETEROGENEOUS)
def test_uniform_heterogeneous_subscriptions(subscriptions, counts, spread):
    target = uniform(subscriptions, counts, {})
    check_cover(subscriptions, counts, target)
    sizes = [len(p) for p in target.values()]
    assert max(sizes) - min(sizes) <= max(spread, 1)


def test_uniform_is_sticky_when_a_member_leaves_or_joins():
    counts = {"t": 12}
    three = uniform({m: frozenset({"t"}) for m in (A, B, C)}, counts, {})
    two = uniform({m: frozenset({"t"}) for m in (A, B)}, counts, three)
    for m in (A, B):
        assert three[m] <= two[m]  # only the leaver's partitions moved
    four = uniform({m: frozenset({"t"}) for m in (A, B, C, D)}, counts, three)
    moved = sum(len(three[m] - four[m]) for m in (A, B, C))
    assert moved == len(four[D]) == 3  # the newcomer's share, and nothing else


def test_uniform_random_cases_against_the_properties():
    rng = random.Random(848)
    for _ in range(200):
        topics = {f"t{i}": rng.randint(1, 8) for i in range(rng.randint(1, 4))}
        members = [f"m{i}" for i in range(rng.randint(1, 6))]
        subscriptions = {m: frozenset(rng.sample(sorted(topics), rng.randint(1, len(topics)))) for m in members}
        current = uniform(subscriptions, topics, {})
        check_cover(subscriptions, topics, current)
        if len({*subscriptions.values()}) == 1:
            sizes = [len(p) for p in current.values()]
            assert max(sizes) - min(sizes) <= 1


RANGE = [  # (subscriptions, counts, expected {member: {topic: partitions}})
    (subs((A, "t"), (B, "t")), {"t": 4}, {A: {"t": [0, 1]}, B: {"t": [2, 3]}}),
    (subs((A, "t"), (B, "t"), (C, "t")), {"t": 7}, {A: {"t": [0, 1, 2]}, B: {"t": [3, 4]}, C: {"t": [5, 6]}}),
    (subs((A, "t"), (B, "t"), (C, "t")), {"t": 2}, {A: {"t": [0]}, B: {"t": [1]}, C: {}}),
    # co-partitioned topics: each member gets the same partition numbers of both
    (subs((A, "t,u"), (B, "t,u")), {"t": 3, "u": 3},
     {A: {"t": [0, 1], "u": [0, 1]}, B: {"t": [2], "u": [2]}}),
    (subs((A, "t"), (B, "t,u")), {"t": 2, "u": 2}, {A: {"t": [0]}, B: {"t": [1], "u": [0, 1]}}),
]


@pytest.mark.parametrize("subscriptions,counts,expected", RANGE)
def test_range(subscriptions, counts, expected):
    target = contiguous_range(subscriptions, counts, {})
    check_cover(subscriptions, counts, target)
    assert target == {m: frozenset((t, p) for t, ps in by_topic.items() for p in ps)
                      for m, by_topic in expected.items()}


def test_range_blocks_are_contiguous_and_aligned():
    counts = {"t": 10, "u": 10, "v": 3}
    members = [f"m{i}" for i in range(4)]
    target = contiguous_range({m: frozenset(counts) for m in members}, counts, {})
    for m in members:
        for topic in counts:
            ps = sorted(p for t, p in target[m] if t == topic)
            assert ps == list(range(ps[0], ps[0] + len(ps))) if ps else True
        assert {p for t, p in target[m] if t == "t"} == {p for t, p in target[m] if t == "u"}
    assert [len([1 for t, _ in target[m] if t == "t"]) for m in members] == [3, 3, 2, 2]
    assert list(itertools.chain.from_iterable(sorted(p for t, p in target[m] if t == "t") for m in members)) == \
        list(range(10))
