"""A consumer's side of a classic group (JoinGroup / SyncGroup / Heartbeat /
LeaveGroup), as a pure core: Kafka's ConsumerCoordinator with the eager protocol and a
client-side range assignor, written anew. Its shell is ``node.client.classic_group``.
Nothing here does I/O or reads a clock.

Rules:

- One request in flight at a time; the core builds it (``next_request``), the shell
  sends it without waiting and feeds back the answer (``on_response``) or the failure
  (``on_failure``), then carries out ``take_actions()`` in order.
- Joining: JoinGroup with the member id ("" the first time; MEMBER_ID_REQUIRED gives
  one, KIP-394, and the member joins again with it at once) and one protocol, "range",
  whose metadata is the Subscription. The leader (the answer names it) computes the
  assignment of every member with the range assignor over the members' subscriptions
  and the partition counts the shell provides (``NeedPartitionCounts``), then sends it
  in SyncGroup; the others send an empty SyncGroup. SyncGroup's answer is this member's
  assignment: ``Assign`` it.
- Eager rebalancing: before joining again (a Heartbeat or SyncGroup says
  REBALANCE_IN_PROGRESS, or the subscription changed) the member commits (auto-commit)
  and revokes everything it owns.
- ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID: the partitions are LOST
  (another member may own them already: no commit), then join again (UNKNOWN_MEMBER_ID:
  with no member id).
- NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost connection, a timeout: find the
  coordinator again, retry after ``retry_backoff_ms`` (a join starts over);
  COORDINATOR_LOAD_IN_PROGRESS: retry the same coordinator.
- The leader watches the partition counts it assigned from (``counts_changed``, the
  shell looks every few seconds): a topic created or grown since makes it join again,
  so the group rebalances onto it (Kafka's leader does the same).
- Heartbeats every ``heartbeat_interval_ms`` while stable. ``leave``: commit and revoke,
  then LeaveGroup; a static member (``instance_id``, KIP-345) sends no LeaveGroup, as
  Kafka's consumer: the coordinator keeps its place until its session ends, and a
  member that joins with the same instance id takes it without a rebalance.

Invariant (asserted): the member owns partitions only while STABLE, and only those of
its last SyncGroup answer.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from node.core.consumer_member import (Assign, Commit, Fatal, FindCoordinator, Lose,
                                       Revoke)
from node.core.group import Subscription, assign
from node.wire.consumer_protocol import (ConsumerProtocolError, decode_assignment,
                                         decode_subscription, encode_assignment,
                                         encode_subscription)

PROTOCOL_TYPE = "consumer"
ASSIGNOR = "range"
NO_GENERATION = -1

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14     # Kafka's API keys


class Errors(enum.IntEnum):
    REQUEST_TIMED_OUT = 7
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    ILLEGAL_GENERATION = 22
    UNKNOWN_MEMBER_ID = 25
    REBALANCE_IN_PROGRESS = 27
    MEMBER_ID_REQUIRED = 79
    FENCED_INSTANCE_ID = 82


REDISCOVER = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                        Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION})
RETRY = REDISCOVER | {Errors.COORDINATOR_LOAD_IN_PROGRESS}
FENCED = frozenset({Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID,
                    Errors.FENCED_INSTANCE_ID})


class State(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"        # JoinGroup due or in flight
    ASSIGNING = "assigning"    # the leader waits for partition counts
    SYNCING = "syncing"        # SyncGroup due or in flight
    STABLE = "stable"
    LEAVING = "leaving"
    LEFT = "left"


@dataclass(frozen=True)
class NeedPartitionCounts:
    """The leader needs {topic: partition count} of ``topics`` (``partition_counts``)."""
    topics: frozenset[str]


class ClassicMemberCore:
    def __init__(self, group_id: str, *, session_timeout_ms: int, rebalance_timeout_ms: int,
                 heartbeat_interval_ms: int, retry_backoff_ms: int = 100,
                 auto_commit: bool = True, instance_id: str | None = None):
        assert group_id and 0 < heartbeat_interval_ms < session_timeout_ms
        assert instance_id is None or instance_id, "an instance id is not empty"
        self.instance_id = instance_id
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.auto_commit = auto_commit
        self.state = State.UNSUBSCRIBED
        self.member_id = ""
        self.generation = NO_GENERATION
        self.leader = False
        self.topics: frozenset[str] = frozenset()
        self.owned: frozenset[tuple[str, int]] = frozenset()
        self.in_flight: int | None = None         # the API key of the request out
        self.next_request_ms = 0
        self._members: dict[str, Subscription] = {}
        self.assigned_counts: dict[str, int] | None = None   # the leader's, last sync
        self._sync_assignments: list[dict] = []
        self._actions: list = []

    # -- the application
    def subscribe(self, topics, now_ms: int) -> None:
        topics = frozenset(topics)
        if self.state in (State.LEAVING, State.LEFT):
            raise RuntimeError("subscribe() after the member left its group")
        changed = topics != self.topics
        self.topics = topics
        if self.state is State.UNSUBSCRIBED or (changed and self.state is State.STABLE):
            self._rejoin(now_ms)

    def leave(self, now_ms: int) -> None:
        if self.state in (State.UNSUBSCRIBED, State.LEFT):
            self.state = State.LEFT
            return
        self._revoke_all()
        self.state = State.LEAVING if self.member_id and not self.instance_id else State.LEFT
        self.in_flight = None
        self.next_request_ms = now_ms

    @property
    def stable(self) -> bool:
        return self.state is State.STABLE

    # -- the shell
    def next_request(self, now_ms: int) -> tuple[int, dict] | None:
        """(API key, body) to send now, or None (one in flight, or nothing due)."""
        if self.in_flight is not None or now_ms < self.next_request_ms:
            return None
        if self.state is State.JOINING:
            request = (JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "member_id": self.member_id, "group_instance_id": self.instance_id,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": ASSIGNOR,
                               "metadata": encode_subscription(self.topics)}],
                "reason": None})
        elif self.state is State.SYNCING:
            request = (SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": self.instance_id,
                "protocol_type": PROTOCOL_TYPE, "protocol_name": ASSIGNOR,
                "assignments": self._sync_assignments})
        elif self.state is State.STABLE:
            request = (HEARTBEAT, {"group_id": self.group_id,
                                   "generation_id": self.generation,
                                   "member_id": self.member_id,
                                   "group_instance_id": self.instance_id})
        elif self.state is State.LEAVING:
            request = (LEAVE_GROUP, {"group_id": self.group_id, "members": [
                {"member_id": self.member_id, "group_instance_id": self.instance_id,
                 "reason": "the consumer is closing"}]})
        else:
            return None
        self.in_flight = request[0]
        return request

    def on_failure(self, now_ms: int, error_code: int) -> None:
        api, self.in_flight = self.in_flight, None
        assert api is not None
        if api == LEAVE_GROUP:
            self.state = State.LEFT
            return
        if error_code in REDISCOVER:
            self._actions.append(FindCoordinator())
        if api == SYNC_GROUP:                 # the generation may be over: join again
            self.state = State.JOINING
        self.next_request_ms = now_ms + self.retry_backoff_ms

    def on_response(self, now_ms: int, body: dict) -> None:
        api = self.in_flight
        assert api is not None
        code = int(body.get("error_code") or 0)
        if api == LEAVE_GROUP:
            self.in_flight = None
            self.state = State.LEFT
            return
        if code in RETRY:
            self.on_failure(now_ms, code)
            return
        self.in_flight = None
        if code in FENCED:
            self._fenced(now_ms, reset_id=code == Errors.UNKNOWN_MEMBER_ID)
        elif code == Errors.REBALANCE_IN_PROGRESS:
            self._rejoin(now_ms)
        elif code == Errors.MEMBER_ID_REQUIRED and api == JOIN_GROUP:
            self.member_id = body["member_id"]
            self.next_request_ms = now_ms
        elif code:
            self._actions.append(Fatal(code, body.get("error_message") or ""))
            self.state = State.LEFT
        elif api == JOIN_GROUP:
            self._joined(now_ms, body)
        elif api == SYNC_GROUP:
            self._synced(now_ms, body)
        elif self.state is State.STABLE:       # a heartbeat's answer
            self.next_request_ms = now_ms + self.heartbeat_interval_ms

    def partition_counts(self, counts: dict[str, int], now_ms: int) -> None:
        """The leader's answer to NeedPartitionCounts: compute and sync."""
        if self.state is not State.ASSIGNING:
            return
        self.assigned_counts = dict(counts)
        shares = assign(self._members, {t: n for t, n in counts.items() if n})
        self._sync_assignments = [{"member_id": m, "assignment": encode_assignment(tps)}
                                  for m, tps in sorted(shares.items())]
        self.state = State.SYNCING
        self.next_request_ms = now_ms

    def counts_changed(self, counts: dict[str, int], now_ms: int) -> None:
        """The leader's periodic look at the partition counts: join again if they moved."""
        if self.state is State.STABLE and self.leader and \
                self.assigned_counts is not None and counts != self.assigned_counts:
            self._rejoin(now_ms)

    def take_actions(self) -> list:
        out, self._actions = self._actions, []
        return out

    # -- inside
    def _joined(self, now_ms: int, body: dict) -> None:
        self.member_id = body["member_id"]
        self.generation = int(body["generation_id"])
        self.leader = body.get("leader") == self.member_id
        self.assigned_counts = None
        self._sync_assignments = []
        self.next_request_ms = now_ms
        if self.leader and not body.get("skip_assignment"):
            members = {}
            for m in body.get("members") or ():
                try:
                    members[m["member_id"]] = Subscription(
                        frozenset(decode_subscription(m.get("metadata"))))
                except ConsumerProtocolError:
                    members[m["member_id"]] = Subscription(frozenset())
            self._members = members
            self.state = State.ASSIGNING
            self._actions.append(NeedPartitionCounts(
                frozenset(t for s in members.values() for t in s.topics)))
        else:
            self.state = State.SYNCING

    def _synced(self, now_ms: int, body: dict) -> None:
        try:
            partitions = frozenset(decode_assignment(body.get("assignment")))
        except ConsumerProtocolError as e:
            self._actions.append(Fatal(-1, f"the leader's assignment is unreadable: {e}"))
            self.state = State.LEFT
            return
        assert not self.owned, self.owned         # eager: everything was revoked
        self.owned = partitions
        self.state = State.STABLE
        self.next_request_ms = now_ms + self.heartbeat_interval_ms
        if partitions:
            self._actions.append(Assign(partitions))

    def _revoke_all(self) -> None:
        if self.owned:
            if self.auto_commit:
                self._actions.append(Commit(self.owned))
            self._actions.append(Revoke(self.owned))
        self.owned = frozenset()

    def _rejoin(self, now_ms: int) -> None:
        self._revoke_all()
        self.state = State.JOINING
        self.next_request_ms = now_ms

    def _fenced(self, now_ms: int, reset_id: bool) -> None:
        if self.owned:
            self._actions.append(Lose(self.owned))
        self.owned = frozenset()
        self.generation = NO_GENERATION
        if reset_id:
            self.member_id = ""
        self.state = State.JOINING
        self.next_request_ms = now_ms
