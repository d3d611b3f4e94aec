"""The share-group assignor (Kafka's ``simple`` rule), as a pure function: tables of cases."""
from __future__ import annotations

import itertools

import pytest

from headwater.broker.share.assignor import assign


def _members(n: int) -> list[str]:
    return [f"m{i}" for i in range(n)]


@pytest.mark.parametrize("members, partitions, expected", [
    (1, 3, {"m0": [0, 1, 2]}),
    (2, 4, {"m0": [0, 2], "m1": [1, 3]}),
    (3, 4, {"m0": [0, 1], "m1": [2], "m2": [3]}),
    (2, 2, {"m0": [0], "m1": [1]}),
    (3, 2, {"m0": [0, 1], "m1": [0], "m2": [1]}),          # more members than partitions: shared
    (4, 2, {"m0": [0], "m1": [0], "m2": [1], "m3": [1]}),
    (3, 1, {"m0": [0], "m1": [0], "m2": [0]}),
])
def test_a_fresh_group_spreads_the_partitions(members, partitions, expected):
    subscriptions = {m: {"t"} for m in _members(members)}
    assert assign(subscriptions, {"t": partitions}, {}) == {m: {"t": ps} for m, ps in expected.items()}


@pytest.mark.parametrize("members, partitions", list(itertools.product(range(1, 8), range(1, 8))))
def test_balance_and_sharing_for_every_shape(members, partitions):
    """Each partition has ceil(M / P) members; member counts differ by at most one; everyone gets work."""
    got = assign({m: {"t"} for m in _members(members)}, {"t": partitions}, {})
    sharing = -(-members // partitions)
    holders = {p: sum(p in a.get("t", []) for a in got.values()) for p in range(partitions)}
    counts = [len(a.get("t", [])) for a in got.values()]
    assert holders == {p: sharing for p in range(partitions)}
    assert max(counts) - min(counts) <= 1 and min(counts) >= 1


def test_a_joining_member_moves_as_few_partitions_as_balance_needs():
    before = assign({"a": {"t"}, "b": {"t"}}, {"t": 6}, {})
    after = assign({"a": {"t"}, "b": {"t"}, "c": {"t"}}, {"t": 6}, before)
    assert before == {"a": {"t": [0, 2, 4]}, "b": {"t": [1, 3, 5]}}
    assert after == {"a": {"t": [0, 2]}, "b": {"t": [1, 3]}, "c": {"t": [4, 5]}}   # one partition each moved


def test_a_leaving_member_leaves_the_others_in_place():
    before = {"a": {"t": [0, 1]}, "b": {"t": [3, 4]}, "c": {"t": [2, 5]}}
    after = assign({"a": {"t"}, "b": {"t"}}, {"t": 6}, before)
    assert after == {"a": {"t": [0, 1, 2]}, "b": {"t": [3, 4, 5]}}


def test_the_assignment_is_stable_when_nothing_changes():
    subscriptions = {m: {"t", "u"} for m in _members(5)}
    first = assign(subscriptions, {"t": 3, "u": 4}, {})
    assert assign(subscriptions, {"t": 3, "u": 4}, first) == first


def test_same_subscriptions_pool_the_topics_partitions():
    got = assign({"a": {"t", "u"}, "b": {"t", "u"}}, {"t": 1, "u": 1}, {})
    assert got == {"a": {"t": [0]}, "b": {"u": [0]}}


def test_different_subscriptions_spread_each_topic_over_its_members():
    got = assign({"a": {"t"}, "b": {"u"}, "c": {"t", "u"}}, {"t": 2, "u": 2}, {})
    assert got == {"a": {"t": [0]}, "b": {"u": [0]}, "c": {"t": [1], "u": [1]}}


def test_missing_topics_and_empty_subscriptions_get_nothing():
    assert assign({"a": {"gone"}, "b": set()}, {}, {}) == {"a": {}, "b": {}}
    assert assign({}, {"t": 3}, {}) == {}


def test_partitions_added_to_a_topic_are_spread():
    before = assign({"a": {"t"}, "b": {"t"}}, {"t": 2}, {})
    after = assign({"a": {"t"}, "b": {"t"}}, {"t": 4}, before)
    assert before == {"a": {"t": [0]}, "b": {"t": [1]}}
    assert after == {"a": {"t": [0, 2]}, "b": {"t": [1, 3]}}
