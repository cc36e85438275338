"""The consumer-group rebalance of the Kafka paper (Algorithm 1), as a pure core.
(A consumer uses it with ``group_protocol="zookeeper"``. Kafka's later design, a group
coordinator on a broker, is ``node.core.groups``; a member's side of it is
``node.core.consumer_member`` (KIP-848) or ``node.core.classic_member``.)

Each member of a group runs one ``GroupCore``. The coordinator holds three registries
(DESIGN.md, "Coordinator layout"): the consumer registry (who is in the group and what
each subscribes to), the ownership registry (which member owns each partition: an
ephemeral node, so it is released when its owner's session ends) and the offset
registry. The core decides; its shell (``node.client.group``) talks to the coordinator
and tells the core what happened. Nothing here does I/O or reads a clock.

A rebalance, started by a watch on the consumer or broker/topic registries (or by
joining):

1. commit what has been consumed (when auto-commit is on), tell the application the
   partitions are revoked, and release every partition this member owns;
2. read the consumer and topic registries;
3. compute this member's share: per topic, the partitions sorted, the subscribed
   members sorted by id, member ``j`` of ``C`` taking a contiguous range of ``P / C``
   partitions with the first ``P mod C`` members taking one more (Kafka's range
   assignor; the paper's ``N = |P|/|C|``);
4. claim each partition of the share in the ownership registry. If one is still owned by
   another member (it has not released yet), release what was claimed, back off and go
   back to 2. Else the share is this member's: fetching starts at the committed offsets.

A change noticed during a rebalance makes another one follow it. Because every member
computes the same function of the same registries, once the registries stop changing
and every member has read them, the shares are disjoint and cover every partition.

The shell calls ``changed()``, ``registries_read(...)``, ``claimed(...)``,
``backoff_elapsed()`` and ``session_lost()``; after each it executes ``take_actions()``
in order and feeds each result back. Each action is a small frozen dataclass below.
"""
from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

TP = tuple[str, int]


# ------------------------------------------------------------------ the assignment

@dataclass(frozen=True)
class Subscription:
    """A member's subscription as its registry entry says: explicit topics, or a regular
    expression matched against every topic name (Kafka 0.8's white list)."""

    topics: frozenset[str] = frozenset()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics


def assign(members: dict[str, Subscription], partitions: dict[str, int]
           ) -> dict[str, list[TP]]:
    """{member id: its partitions}, the range assignor over the registries' contents.
    Deterministic: depends only on the arguments (sorted ids, sorted partitions)."""
    out: dict[str, list[TP]] = {m: [] for m in members}
    for topic in sorted(partitions):
        count = partitions[topic]
        assert count >= 0, (topic, count)
        subscribers = sorted(m for m, s in members.items() if s.matches(topic))
        if not subscribers or count == 0:
            continue
        share, extra = divmod(count, len(subscribers))
        start = 0
        for j, member in enumerate(subscribers):
            size = share + (1 if j < extra else 0)
            out[member] += [(topic, p) for p in range(start, start + size)]
            start += size
        assert start == count
    return out


# ------------------------------------------------------------------ actions

@dataclass(frozen=True)
class Commit:
    """Write the consumed positions of ``partitions`` to the offset registry."""
    partitions: frozenset


@dataclass(frozen=True)
class Revoke:
    """Stop fetching ``partitions`` and tell the application (on_partitions_revoked)."""
    partitions: frozenset


@dataclass(frozen=True)
class Release:
    """Delete this member's ownership nodes of ``partitions``."""
    partitions: frozenset


@dataclass(frozen=True)
class ReadRegistries:
    """Read the consumer registry (ids and subscriptions) and the topics' partition
    counts, set watches on both, and call ``registries_read``."""


@dataclass(frozen=True)
class Claim:
    """Create an ownership node for each of ``partitions``; call ``claimed`` with the
    ones created and the ones another member holds."""
    partitions: frozenset


@dataclass(frozen=True)
class BackOff:
    """Call ``backoff_elapsed`` after ``ms``."""
    ms: int


@dataclass(frozen=True)
class Assigned:
    """``partitions`` are this member's: start fetching at the committed offsets (the
    reset policy where there are none) and tell the application (on_partitions_assigned)."""
    partitions: frozenset


@dataclass(frozen=True)
class Register:
    """(Re-)create this member's ephemeral node in the consumer registry."""


class State(enum.Enum):
    STABLE = "Stable"
    READING = "Reading"               # ReadRegistries is out
    CLAIMING = "Claiming"             # Claim is out
    BACKING_OFF = "BackingOff"        # BackOff is out


@dataclass
class GroupCore:
    member_id: str
    backoff_ms: int = 250
    auto_commit: bool = True
    state: State = State.STABLE
    owned: frozenset = frozenset()        # partitions this member holds and fetches
    again: bool = False                   # a change arrived during a rebalance
    rebalances: int = 0                   # completed rebalances (for tests and tools)
    _actions: list = field(default_factory=list)

    def __post_init__(self) -> None:
        assert self.member_id and self.backoff_ms >= 0

    # --------------------------------------------------------------- events
    def join(self) -> None:
        """First event: register, then rebalance."""
        self._actions.append(Register())
        self.changed()

    def resubscribed(self) -> None:
        """The subscription changed: register it again, then rebalance."""
        self._actions.append(Register())
        self.changed()

    def changed(self) -> None:
        """A watch fired (members or topics changed), or the shell wants a rebalance."""
        if self.state is not State.STABLE:
            self.again = True
            return
        self._start()

    def registries_read(self, members: dict[str, Subscription],
                        partitions: dict[str, int]) -> None:
        assert self.state is State.READING, self.state
        share = frozenset(assign(members, partitions).get(self.member_id, ()))
        if self.member_id not in members:
            # Our registration is not there (yet): own nothing; re-register and go again.
            self._actions.append(Register())
            self.again = True
        self.state = State.CLAIMING
        self._actions.append(Claim(share))

    def claimed(self, won: frozenset, held_by_others: frozenset) -> None:
        assert self.state is State.CLAIMING, self.state
        assert not (won & held_by_others)
        if held_by_others:
            if won:
                self._actions.append(Release(won))
            self.state = State.BACKING_OFF
            self._actions.append(BackOff(self.backoff_ms))
            return
        self.owned = won
        self.state = State.STABLE
        self.rebalances += 1
        self._actions.append(Assigned(won))
        if self.again:
            self.again = False
            self._start()

    def backoff_elapsed(self) -> None:
        assert self.state is State.BACKING_OFF, self.state
        self.again = False     # the read that follows sees every change so far
        self.state = State.READING
        self._actions.append(ReadRegistries())

    def session_lost(self) -> None:
        """The coordinator ended our session: our ephemerals (registration, ownership)
        are gone, so another member may own our partitions already. Stop at once,
        commit nothing, register again and rebalance from the start. The shell drops
        whatever it was doing for the old session (its results are not fed back)."""
        if self.owned:
            self._actions.append(Revoke(self.owned))
        self.owned = frozenset()
        self.again = False
        self.state = State.READING
        self._actions += [Register(), ReadRegistries()]

    def leave(self) -> None:
        """A clean close: commit, revoke and release at once (others rebalance on the
        registration's deletion, which the shell does after these)."""
        if self.owned:
            if self.auto_commit:
                self._actions.append(Commit(self.owned))
            self._actions += [Revoke(self.owned), Release(self.owned)]
        self.owned = frozenset()

    # --------------------------------------------------------------- output
    def take_actions(self) -> list:
        out, self._actions = self._actions, []
        return out

    # --------------------------------------------------------------- internals
    def _start(self) -> None:
        if self.owned:
            if self.auto_commit:
                self._actions.append(Commit(self.owned))
            self._actions += [Revoke(self.owned), Release(self.owned)]
        self.owned = frozenset()
        self.state = State.READING
        self._actions.append(ReadRegistries())
