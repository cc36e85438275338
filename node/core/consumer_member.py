"""A consumer's side of a KIP-848 group (ConsumerGroupHeartbeat), as a pure core.

The broker's group coordinator computes the assignment; a member only says what it
subscribes to and what it owns, and reconciles toward the partitions the coordinator
gives it. This core is that member (Kafka's ConsumerMembershipManager, written anew):
its shell (``node.client.broker_group``) sends the heartbeats it builds, feeds back
the answers, and carries out the actions it returns, in order, in the consumer's
thread. Nothing here does I/O or reads a clock (``now_ms`` comes with every call).

Rules (KIP-848, as Kafka 4's consumer behaves):

- Joining: a heartbeat with member epoch 0, the member id (a UUID the member made,
  ConsumerGroupHeartbeat v1), the subscribed topic names, the rebalance timeout and the
  partitions owned (none). Every heartbeat here carries the full state (a coordinator
  accepts a full request at any time), so a lost answer never leaves the coordinator
  with a stale view.
- At most one heartbeat is in flight. The next is due ``heartbeat_interval_ms`` (from
  the last answer) after the previous one, or at once when the member must
  acknowledge a reconciliation, join, or rejoin.
- An answer with an assignment is the member's new target: partitions it owns and no
  longer gets are revoked FIRST (their positions committed when auto-commit is on,
  then the application told), then the new ones are taken, then a heartbeat at once
  tells the coordinator what is owned now. The coordinator only hands out partitions
  that no other member still owns, so the member may take them at once.
- Partitions are named by topic id; one whose topic id is not known yet (metadata is
  older than the topic) waits for metadata (``NeedMetadata``), as Kafka's does.
- FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: every owned partition is LOST (no commit:
  another member may own it already), the member rejoins at epoch 0 with its id.
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection or a timeout: find the
  coordinator again (``FindCoordinator``) and send again after ``retry_backoff_ms``;
  COORDINATOR_LOAD_IN_PROGRESS: same coordinator, after the backoff.
- Leaving (``leave``): revoke (with the auto-commit) and heartbeat with epoch -1, so the
  coordinator hands the partitions to the others at once; its answer is not waited for
  beyond what the shell allows. A static member (``instance_id``, KIP-345) leaves with
  epoch -2: the coordinator keeps its partitions for it until its session ends, and a
  member that joins with the same instance id takes them without a rebalance.
- Any other error is fatal to the membership (``Fatal``): the shell raises it.

Invariant (asserted): the member never owns a partition outside the last target it
was given, and owns nothing while it joins at epoch 0.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

TP = tuple[str, int]          # (topic id, partition) inside the core

LEAVE_EPOCH = -1              # Kafka's LEAVE_GROUP_MEMBER_EPOCH
LEAVE_STATIC_EPOCH = -2       # Kafka's LEAVE_GROUP_STATIC_MEMBER_EPOCH
JOIN_EPOCH = 0


class Errors(enum.IntEnum):
    """The Kafka error codes a member handles (Kafka's numbers)."""

    NONE = 0
    REQUEST_TIMED_OUT = 7
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    UNKNOWN_MEMBER_ID = 25
    FENCED_MEMBER_EPOCH = 110
    STALE_MEMBER_EPOCH = 113


REDISCOVER = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                        Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION})
RETRY = REDISCOVER | {Errors.COORDINATOR_LOAD_IN_PROGRESS}
FENCED = frozenset({Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID})


class State(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"           # epoch 0 heartbeat due or in flight
    STABLE = "stable"             # heartbeating, reconciled with the last target
    ACKNOWLEDGING = "acknowledging"  # reconciled; the coordinator must hear it now
    LEAVING = "leaving"
    LEFT = "left"


# ------------------------------------------------------------------ actions

@dataclass(frozen=True)
class Commit:
    """Commit the positions of ``partitions`` (auto-commit before a revocation)."""
    partitions: frozenset[TP]


@dataclass(frozen=True)
class Revoke:
    """Stop reading ``partitions`` and tell the application (on_partitions_revoked)."""
    partitions: frozenset[TP]


@dataclass(frozen=True)
class Lose:
    """``partitions`` are not ours any more and may be someone else's already: drop
    them without committing (on_partitions_lost)."""
    partitions: frozenset[TP]


@dataclass(frozen=True)
class Assign:
    """Start reading ``partitions`` from their committed offsets (on_partitions_assigned)."""
    partitions: frozenset[TP]


@dataclass(frozen=True)
class FindCoordinator:
    """The coordinator is unknown or moved: look it up before the next heartbeat."""


@dataclass(frozen=True)
class NeedMetadata:
    """The target names topic ids the shell cannot name yet."""
    topic_ids: frozenset[str]


@dataclass(frozen=True)
class Fatal:
    """The membership cannot go on (the error code and message)."""
    error_code: int
    message: str


# ------------------------------------------------------------------ the member

class MemberCore:
    """One member (rules above). ``subscribe``/``leave`` are the application's;
    ``heartbeat_request``/``on_response``/``on_failure`` the shell's, with
    ``take_actions`` after each."""

    def __init__(self, group_id: str, member_id: str, *, rebalance_timeout_ms: int,
                 retry_backoff_ms: int = 100, server_assignor: str | None = None,
                 auto_commit: bool = True, instance_id: str | None = None):
        assert group_id and member_id, (group_id, member_id)
        assert instance_id is None or instance_id, "an instance id is not empty"
        self.instance_id = instance_id
        assert rebalance_timeout_ms > 0 and retry_backoff_ms >= 0
        self.group_id = group_id
        self.member_id = member_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.server_assignor = server_assignor
        self.auto_commit = auto_commit
        self.state = State.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = 0
        self.topics: tuple[str, ...] = ()
        self.owned: frozenset[TP] = frozenset()
        self.target: frozenset[TP] | None = None   # the last assignment received
        self.in_flight = False
        self.owned_sent: frozenset[TP] | None = None   # what the in-flight heartbeat says
        self.next_heartbeat_ms = 0
        self._names: dict[str, str] = {}           # topic id -> name, from the shell
        self._actions: list = []

    # -- the application
    def subscribe(self, topics, now_ms: int) -> None:
        """(Re)subscribe to topic names; a change is sent with the next heartbeat, at once."""
        topics = tuple(sorted(set(topics)))
        if self.state in (State.LEAVING, State.LEFT):
            raise RuntimeError("subscribe() after the member left its group")
        changed = topics != self.topics
        self.topics = topics
        if self.state is State.UNSUBSCRIBED:
            self.state = State.JOINING
            self.next_heartbeat_ms = now_ms
        elif changed:
            self.next_heartbeat_ms = now_ms

    def leave(self, now_ms: int) -> None:
        """Give everything back and heartbeat with epoch -1 (the shell sends it)."""
        if self.state in (State.UNSUBSCRIBED, State.LEFT):
            self.state = State.LEFT
            return
        self._revoke(self.owned)
        self.owned = frozenset()
        self.state = State.LEAVING
        self.next_heartbeat_ms = now_ms

    # -- the shell
    def names_known(self, names: dict[str, str], now_ms: int) -> None:
        """Topic id -> name from fresh metadata; a target waiting on them goes on."""
        self._names = dict(names)
        if self.target is not None and self.state is not State.LEAVING:
            self._reconcile(now_ms)

    def heartbeat_due(self, now_ms: int) -> bool:
        return (not self.in_flight and self.state not in (State.UNSUBSCRIBED, State.LEFT)
                and now_ms >= self.next_heartbeat_ms)

    def heartbeat_request(self, now_ms: int) -> dict:
        """The body of the heartbeat to send now (marks it in flight)."""
        assert self.heartbeat_due(now_ms), (self.state, self.in_flight)
        self.in_flight = True
        self.owned_sent = self.owned
        leaving = self.state is State.LEAVING
        by_topic: dict[str, list[int]] = {}
        for topic_id, partition in sorted(self.owned):
            by_topic.setdefault(topic_id, []).append(partition)
        return {
            "group_id": self.group_id, "member_id": self.member_id,
            "member_epoch": ((LEAVE_STATIC_EPOCH if self.instance_id else LEAVE_EPOCH)
                             if leaving else self.member_epoch),
            "instance_id": self.instance_id, "rack_id": None,
            "rebalance_timeout_ms": self.rebalance_timeout_ms,
            "subscribed_topic_names": list(self.topics), "subscribed_topic_regex": None,
            "server_assignor": self.server_assignor,
            "topic_partitions": [{"topic_id": t, "partitions": ps}
                                 for t, ps in by_topic.items()]}

    def on_failure(self, now_ms: int, error_code: int) -> None:
        """The heartbeat got no answer (timeout, lost connection) or a retriable one."""
        assert self.in_flight
        self.in_flight = False
        if self.state is State.LEAVING:
            self.state = State.LEFT        # a leave is sent once; the session ends it
            return
        if error_code in REDISCOVER:
            self._actions.append(FindCoordinator())
        self.next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def on_response(self, now_ms: int, body: dict) -> None:
        """A heartbeat's answer (a ConsumerGroupHeartbeat response body)."""
        assert self.in_flight
        self.in_flight = False
        code = int(body.get("error_code") or 0)
        if self.state is State.LEAVING:
            self.state = State.LEFT
            return
        if code in RETRY:
            self.in_flight = True
            self.on_failure(now_ms, code)
            return
        if code in FENCED:
            self._fenced(now_ms)
            return
        if code:
            self._actions.append(Fatal(code, body.get("error_message") or ""))
            self.state = State.LEFT
            return
        if body.get("member_id"):
            self.member_id = body["member_id"]
        self.member_epoch = int(body["member_epoch"])
        assert self.member_epoch > 0, body
        self.heartbeat_interval_ms = max(0, int(body.get("heartbeat_interval_ms") or 0))
        self.next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        if self.state in (State.JOINING, State.ACKNOWLEDGING):
            if self.owned == self.owned_sent:
                self.state = State.STABLE
            else:        # reconciled while this heartbeat was out: say so at once
                self.state = State.ACKNOWLEDGING
                self.next_heartbeat_ms = now_ms
        assignment = body.get("assignment")
        if assignment is not None:
            self.target = frozenset(
                (str(t["topic_id"]), int(p)) for t in assignment.get("topic_partitions") or ()
                for p in t["partitions"])
            self._reconcile(now_ms)

    def take_actions(self) -> list:
        out, self._actions = self._actions, []
        return out

    # -- inside
    def _fenced(self, now_ms: int) -> None:
        if self.owned:
            self._actions.append(Lose(self.owned))
        self.owned = frozenset()
        self.target = None
        self.member_epoch = JOIN_EPOCH
        self.state = State.JOINING
        self.next_heartbeat_ms = now_ms

    def _revoke(self, partitions: frozenset) -> None:
        if not partitions:
            return
        if self.auto_commit:
            self._actions.append(Commit(partitions))
        self._actions.append(Revoke(partitions))

    def _reconcile(self, now_ms: int) -> None:
        """Move ``owned`` toward ``target``: revoke first, then take what is named."""
        target = self.target
        assert target is not None
        gone = self.owned - target
        self._revoke(gone)
        unnamed = frozenset(t for t, _ in target - self.owned if t not in self._names)
        if unnamed:
            self._actions.append(NeedMetadata(unnamed))
        new = frozenset(tp for tp in target - self.owned if tp[0] in self._names)
        if new:
            self._actions.append(Assign(new))
        if gone or new:
            self.owned = (self.owned - gone) | new
            self.state = State.ACKNOWLEDGING
            self.next_heartbeat_ms = now_ms       # tell the coordinator at once
        assert self.owned <= target, (self.owned, target)
