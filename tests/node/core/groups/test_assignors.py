"""The KIP-848 server assignors (node.core.groups.assignors) against their rules."""
from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from node.core.groups.assignors import ASSIGNORS, MemberSpec, range_, range_order, uniform

TOPICS = ["tA", "tB", "tC", "tD"]


@st.composite
def groups(draw, homogeneous: bool | None = None):
    partitions = {t: draw(st.integers(0, 12)) for t in draw(
        st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True))}
    n = draw(st.integers(1, 8))
    same = draw(st.booleans()) if homogeneous is None else homogeneous
    shared = frozenset(draw(st.lists(st.sampled_from(sorted(partitions)), min_size=1,
                                     unique=True)))
    members = {}
    for i in range(n):
        topics = shared if same else frozenset(draw(st.lists(
            st.sampled_from(sorted(partitions)), unique=True)))
        # a previous target: anything, valid or not (grown/shrunk topics, duplicates)
        previous = {t: frozenset(draw(st.lists(st.integers(0, 14), max_size=5)))
                    for t in draw(st.lists(st.sampled_from(TOPICS), unique=True, max_size=3))}
        member_id = f"m{draw(st.integers(0, 99)):02d}-{i}"
        instance = draw(st.one_of(st.none(), st.sampled_from(["i1", "i2", "i3"])))
        if instance in {s.instance_id for s in members.values()}:
            instance = None
        members[member_id] = MemberSpec(member_id, instance, topics, previous)
    return members, partitions


def check_complete(members, partitions, result):
    """Every partition of a subscribed topic is assigned once, to a subscriber."""
    assert set(result) == set(members)
    seen = {}
    for m, topics in result.items():
        for t, ps in topics.items():
            assert t in members[m].topics, (m, t)
            assert ps, "no empty entries"
            for p in ps:
                assert 0 <= p < partitions[t]
                assert (t, p) not in seen, f"{t}-{p} assigned to {seen[(t, p)]} and {m}"
                seen[(t, p)] = m
    subscribed = {t for s in members.values() for t in s.topics}
    want = {(t, p) for t in subscribed for p in range(partitions[t])}
    assert set(seen) == want


def loads(result):
    return {m: sum(len(ps) for ps in topics.values()) for m, topics in result.items()}


@given(groups())
@settings(max_examples=200, deadline=None)
def test_every_assignor_assigns_each_subscribed_partition_to_exactly_one_subscriber(g):
    members, partitions = g
    for name, assignor in ASSIGNORS.items():
        check_complete(members, partitions, assignor(members, partitions))


@given(groups(), st.randoms())
@settings(max_examples=100, deadline=None)
def test_assignors_are_deterministic_whatever_the_order_of_their_input(g, rnd):
    members, partitions = g
    shuffled = list(members.items())
    rnd.shuffle(shuffled)
    parts = list(partitions.items())
    rnd.shuffle(parts)
    for assignor in ASSIGNORS.values():
        assert assignor(members, partitions) == assignor(dict(shuffled), dict(parts))


@given(groups(homogeneous=True))
@settings(max_examples=200, deadline=None)
def test_uniform_balances_a_homogeneous_group_within_one(g):
    members, partitions = g
    counts = loads(uniform(members, partitions)).values()
    assert max(counts) - min(counts) <= 1


@given(groups())
@settings(max_examples=150, deadline=None)
def test_uniform_leaves_no_member_two_above_a_less_loaded_subscriber_of_its_topics(g):
    members, partitions = g
    result = uniform(members, partitions)
    load = loads(result)
    for m, topics in result.items():
        for t in topics:
            for other in members:
                if t in members[other].topics:
                    assert load[m] <= load[other] + 1, (m, other, t, load)


@given(groups())
@settings(max_examples=150, deadline=None)
def test_uniform_moves_nothing_when_run_again_on_its_own_result(g):
    members, partitions = g
    first = uniform(members, partitions)
    again = {m: MemberSpec(s.member_id, s.instance_id, s.topics, first[m])
             for m, s in members.items()}
    assert uniform(again, partitions) == first


def test_uniform_is_sticky_when_a_member_joins_a_balanced_group():
    partitions = {"tA": 6, "tB": 6}
    ids = ["a", "b", "c"]
    members = {m: MemberSpec(m, None, frozenset(partitions)) for m in ids}
    before = uniform(members, partitions)
    grown = {m: MemberSpec(m, None, frozenset(partitions), before[m]) for m in ids}
    grown["d"] = MemberSpec("d", None, frozenset(partitions))
    after = uniform(grown, partitions)
    assert sorted(loads(after).values()) == [3, 3, 3, 3]
    # only what the newcomer needs moved: 3 partitions, each from one old member
    kept = sum(len(after[m].get(t, frozenset()) & before[m].get(t, frozenset()))
               for m in ids for t in partitions)
    assert kept == 12 - 3


@given(groups())
@settings(max_examples=200, deadline=None)
def test_range_gives_each_topic_contiguous_ranges_in_member_order(g):
    members, partitions = g
    result = range_(members, partitions)
    order = range_order(members)
    for t in {t for s in members.values() for t in s.topics}:
        subs = [m for m in order if t in members[m].topics]
        quota, extra = divmod(partitions[t], len(subs))
        start = 0
        for i, m in enumerate(subs):
            got = sorted(result[m].get(t, ()))
            size = quota + (1 if i < extra else 0)
            assert got == list(range(start, start + size)), (t, m, got, start, size)
            start += size


def test_range_co_partitions_members_with_the_same_topics():
    partitions = {"tA": 5, "tB": 5}
    members = {m: MemberSpec(m, None, frozenset(partitions)) for m in ["x", "y"]}
    members["s"] = MemberSpec("s", "static-1", frozenset(partitions))
    result = range_(members, partitions)
    assert range_order(members) == ["s", "x", "y"]          # static members first
    for m in members:
        assert result[m]["tA"] == result[m]["tB"]
    assert result["s"]["tA"] == {0, 1}


def test_uniform_spreads_a_large_group_evenly():
    rnd = random.Random(7)
    partitions = {f"t{i}": rnd.randint(1, 40) for i in range(20)}
    members = {f"m{i:03d}": MemberSpec(f"m{i:03d}", None, frozenset(partitions))
               for i in range(50)}
    result = uniform(members, partitions)
    check_complete(members, partitions, result)
    counts = loads(result).values()
    assert max(counts) - min(counts) <= 1
