"""The KIP-848 server-side assignors, ``uniform`` and ``range`` (Kafka 4's names).

The group coordinator computes a group's *target assignment* with one of these whenever
the group epoch moves past the assignment epoch (a member joined, left or changed its
subscription, or a subscribed topic was created, deleted or grown). An assignor is a
pure function of:

- the members: each one's id, instance id (static members), subscribed topic ids (only
  topics that exist) and its previous *target* assignment;
- the partition counts of the subscribed topics.

Rules every assignor here keeps (tests/node/core/groups/test_assignors.py checks them):

- every partition of a topic that at least one member subscribes to is assigned to
  exactly one member, and that member subscribes to the topic; nothing else is assigned;
- the result is deterministic: it depends only on the arguments, never on dict order.

``uniform`` (Kafka's UniformAssignor, our own algorithm): balanced and sticky. A member
keeps the partitions of its previous target that are still valid; free partitions go to
the least loaded subscriber; then partitions move, one at a time, from a member holding
more than one partition above the least loaded subscriber of that topic. When all members
subscribe to the same topics, counts end within one of each other, and a membership that
was already balanced moves nothing.

``range`` (Kafka's RangeAssignor): per topic, the subscribers in a fixed order (static
members first by instance id, then the others by member id) take contiguous ranges of
``P // n`` partitions, the first ``P % n`` of them one more. Members subscribed to the same
topics therefore get the same partition numbers of every topic (co-partitioning, for
joins). Not sticky, as Kafka's is not.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

TopicId = str                                    # Kafka's text form of a topic id
Assignment = Mapping[TopicId, frozenset[int]]    # topic id -> partitions

# The balancing loop of ``uniform`` moves one partition per step and each step lowers the
# sum of squared member loads by at least 2, so it ends; this bound only turns a bug into
# an assertion instead of a hang.
UNIFORM_PASSES_MAX = 10_000


@dataclass(frozen=True)
class MemberSpec:
    """What an assignor knows of one member."""

    member_id: str
    instance_id: str | None
    topics: frozenset[TopicId]                      # subscribed topic ids that exist
    previous: Assignment = field(default_factory=dict)   # its previous target assignment

    def __post_init__(self):
        assert self.member_id, "a member has an id"


Assignor = Callable[[Mapping[str, MemberSpec], Mapping[TopicId, int]],
                    dict[str, dict[TopicId, frozenset[int]]]]


def _check(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]) -> None:
    for member_id, spec in members.items():
        assert member_id == spec.member_id, (member_id, spec.member_id)
        assert spec.topics <= partitions.keys(), \
            f"{member_id} subscribes to topics without metadata: {spec.topics - partitions.keys()}"
    assert all(n >= 0 for n in partitions.values()), partitions


def _freeze(owned: dict[str, dict[TopicId, set[int]]]) -> dict[str, dict[TopicId, frozenset[int]]]:
    return {m: {t: frozenset(ps) for t, ps in sorted(topics.items()) if ps}
            for m, topics in owned.items()}


# ------------------------------------------------------------------ uniform

def uniform(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]
            ) -> dict[str, dict[TopicId, frozenset[int]]]:
    """Balanced and sticky; see the module comment."""
    _check(members, partitions)
    order = sorted(members)
    subscribers: dict[TopicId, list[str]] = {}
    for m in order:
        for t in members[m].topics:
            subscribers.setdefault(t, []).append(m)
    owner: dict[tuple[TopicId, int], str] = {}
    load = {m: 0 for m in order}

    # 1. Stickiness: keep what is still valid of each previous target, members in id order
    # (a partition named by two previous targets goes to the first).
    for m in order:
        spec = members[m]
        for t in sorted(spec.previous):
            if t not in spec.topics:
                continue
            for p in sorted(spec.previous[t]):
                if p < partitions[t] and (t, p) not in owner:
                    owner[(t, p)] = m
                    load[m] += 1

    # 2. Free partitions go to the least loaded subscriber; the most constrained topics
    # (fewest subscribers) first, so flexible topics can even out what they leave.
    for t in sorted(subscribers, key=lambda t: (len(subscribers[t]), t)):
        for p in range(partitions[t]):
            if (t, p) not in owner:
                m = min(subscribers[t], key=lambda m: (load[m], m))
                owner[(t, p)] = m
                load[m] += 1

    # 3. Balance: move a partition from its owner to the least loaded subscriber of its
    # topic while the owner holds more than one above it.
    for _ in range(UNIFORM_PASSES_MAX):
        moved = False
        for (t, p) in sorted(owner):
            m = owner[(t, p)]
            least = min(subscribers[t], key=lambda s: (load[s], s))
            if load[m] > load[least] + 1:
                owner[(t, p)] = least
                load[m] -= 1
                load[least] += 1
                moved = True
        if not moved:
            break
    else:
        raise AssertionError("uniform assignor: balancing did not settle")

    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in order}
    for (t, p), m in owner.items():
        result[m].setdefault(t, set()).add(p)
    return _freeze(result)


# ------------------------------------------------------------------ range

def range_order(members: Mapping[str, MemberSpec]) -> list[str]:
    """Kafka's order: static members by instance id first, then the others by member id."""
    return sorted(members, key=lambda m: (members[m].instance_id is None,
                                          members[m].instance_id or "", m))


def range_(members: Mapping[str, MemberSpec], partitions: Mapping[TopicId, int]
           ) -> dict[str, dict[TopicId, frozenset[int]]]:
    """Contiguous ranges per topic, co-partitioned; see the module comment."""
    _check(members, partitions)
    order = range_order(members)
    result: dict[str, dict[TopicId, set[int]]] = {m: {} for m in order}
    topics = sorted({t for spec in members.values() for t in spec.topics})
    for t in topics:
        subs = [m for m in order if t in members[m].topics]
        quota, extra = divmod(partitions[t], len(subs))
        start = 0
        for i, m in enumerate(subs):
            end = start + quota + (1 if i < extra else 0)
            if end > start:
                result[m][t] = set(range(start, end))
            start = end
        assert start == partitions[t], (t, start, partitions[t])
    return _freeze(result)


ASSIGNORS: dict[str, Assignor] = {"uniform": uniform, "range": range_}
