"""The consumer's side of a consumer group: ``subscribe``, ``commit``, ``committed``,
and the hooks the member calls during a rebalance. A mixin of ``api.Consumer``.

Two kinds of group, chosen by ``group_protocol``:
- ``"consumer"`` (the default, Kafka 4's): the brokers' group coordinator, KIP-848
  (``node.client.broker_group.BrokerGroupMember``: the coordinator assigns);
- ``"classic"``: the same coordinator with the classic protocol (JoinGroup, SyncGroup,
  Heartbeat, LeaveGroup; the group's leader runs the range assignor; eager rebalancing;
  ``node.client.classic_group``), as Kafka's consumer before 4.0;
- ``"zookeeper"``: the Kafka paper's groups, registries in ZooKeeper and Algorithm 1
  in every member (``node.client.group.GroupMember``).
Both drive the consumer through the same hooks below.

Rules:
- Subscription to topics and manual assignment exclude each other.
- The rebalance, and the auto-commit every ``auto_commit_interval_ms``, run inside
  ``poll`` in the caller's thread (``_group_step``); a failed auto-commit is logged and
  the next one tries again.
- A partition the group assigns starts at its committed offset, else at
  ``auto_offset_reset`` (NoOffsetForPartitionError when that is "none").
"""
from __future__ import annotations

import logging
import time

from node.client.consumer.subscription import _tp

log = logging.getLogger("minikafka.consumer")


class NoOffsetForPartitionError(RuntimeError):
    """A group member got a partition with no committed offset and no reset policy."""


GROUP_STEP_MS = 50     # the longest a poll waits on the network before a group step


class _Listener:
    """The application's rebalance listener, its callbacks optional."""

    def __init__(self, listener):
        self.listener = listener

    def on_partitions_revoked(self, tps) -> None:
        if self.listener is not None and hasattr(self.listener, "on_partitions_revoked"):
            self.listener.on_partitions_revoked(tps)

    def on_partitions_assigned(self, tps) -> None:
        if self.listener is not None and hasattr(self.listener, "on_partitions_assigned"):
            self.listener.on_partitions_assigned(tps)

    def on_partitions_lost(self, tps) -> None:
        """Partitions taken away without a revocation (a fenced member); Kafka's
        default calls on_partitions_revoked."""
        if self.listener is not None and hasattr(self.listener, "on_partitions_lost"):
            self.listener.on_partitions_lost(tps)
        else:
            self.on_partitions_revoked(tps)


class GroupMembership:
    """Groups (rules above; state: ``api.Consumer``)."""

    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        """Join ``group_id`` for ``topics`` (or every topic matching the regular
        expression ``pattern``); ``listener`` may have ``on_partitions_revoked(tps)``
        and ``on_partitions_assigned(tps)``. The assignment follows in ``poll``."""
        if self.group_id is None:
            raise RuntimeError("subscribe() needs a group_id")
        if self._group is None:
            if self._states:
                raise RuntimeError("subscribe() after assign(): subscription to topics "
                                   "and manual assignment are mutually exclusive")
            if self.group_protocol == "zookeeper":
                from node.client.group import GroupMember
                self._group = GroupMember(
                    self, self.group_id, self._coordinator_address(),
                    client_id=self.client_id, session_timeout_ms=self.session_timeout_ms,
                    rebalance_backoff_ms=self.rebalance_backoff_ms,
                    auto_commit=self.enable_auto_commit)
            elif self.group_protocol == "classic":
                from node.client.classic_group import ClassicGroupMember
                self._group = ClassicGroupMember(
                    self, self.group_id, client_id=self.client_id,
                    auto_commit=self.enable_auto_commit,
                    rebalance_timeout_ms=self.max_poll_interval_ms,
                    session_timeout_ms=self.session_timeout_ms,
                    heartbeat_interval_ms=self.heartbeat_interval_ms,
                    instance_id=self.group_instance_id)
            else:
                from node.client.broker_group import BrokerGroupMember
                self._group = BrokerGroupMember(
                    self, self.group_id, client_id=self.client_id,
                    auto_commit=self.enable_auto_commit,
                    rebalance_timeout_ms=self.max_poll_interval_ms,
                    server_assignor=self.group_remote_assignor,
                    instance_id=self.group_instance_id)
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
        if isinstance(topics, str):
            topics = [topics]
        self._group.subscribe(topics, pattern, _Listener(listener))

    def _coordinator_address(self) -> str:
        if self.zookeeper_connect:
            return self.zookeeper_connect
        from node.client.admin import Admin
        with Admin(self.bootstrap, request_timeout_ms=self.request_timeout_ms,
                   client_id=self.client_id) as admin:
            _, configs = admin.describe_broker_config()
        self.zookeeper_connect = configs["zookeeper.connect"]
        return self.zookeeper_connect

    def subscription(self) -> set[str] | None:
        if self._group is None or self._group.subscription is None:
            return None
        return set(self._group.subscription.topics) or {self._group.subscription.pattern}

    def member_id(self) -> str | None:
        return None if self._group is None else self._group.member_id

    def commit(self, offsets: dict | None = None) -> dict:
        """Write the committed offsets (the next offsets to read): ``offsets`` {tp:
        offset} or, by default, the position of every assigned partition. Only the
        partitions this member owns are written; returns those."""
        group = self._need_group("commit")
        group.step()
        return group.commit_offsets(self._commit_map(offsets))

    def commit_async(self, offsets: dict | None = None, callback=None):
        """``commit`` on a helper thread, in order; returns a Future of the written
        offsets, and calls ``callback(offsets, exception)`` when done."""
        import concurrent.futures
        group = self._need_group("commit_async")
        wanted = self._commit_map(offsets)
        if hasattr(group, "commit_async"):      # the broker's: on this thread's network
            return group.commit_async(wanted, callback)
        if self._commit_pool is None:
            self._commit_pool = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"{self.client_id}-commit")
        future = self._commit_pool.submit(group.commit_offsets, wanted)
        if callback is not None:
            future.add_done_callback(lambda f: callback(
                wanted, f.exception() if not f.cancelled() else None))
        return future

    def committed(self, tp) -> int | None:
        """The group's committed offset of ``tp`` (None if there is none)."""
        tp = _tp(tp)
        return self._need_group("committed").committed_offsets([tp]).get(
            (tp.topic, tp.partition))

    def _need_group(self, what: str):
        if self._group is None:
            raise RuntimeError(f"{what}() needs a group_id and subscribe()")
        return self._group

    def _commit_map(self, offsets: dict | None) -> dict:
        if offsets is None:
            return self._group_positions(self._states)
        return {(tp[0], tp[1]): getattr(o, "offset", o) for tp, o in
                ((_tp(k), v) for k, v in offsets.items())}

    # The group's hooks (node.client.group calls them in this thread).
    def _group_revoke(self, partitions) -> None:
        gone = {_tp(tp) for tp in partitions}
        self._set_assignment([tp for tp in self._states if tp not in gone])

    def _group_assign(self, partitions, committed: dict) -> None:
        self._set_assignment(list(self._states) + [_tp(tp) for tp in sorted(partitions)])
        for tp in partitions:
            offset = committed.get(tuple(tp))
            if offset is not None:
                self.seek(tp, offset)
            elif self.auto_offset_reset == "none":
                raise NoOffsetForPartitionError(
                    f"no committed offset for {tp[0]}-{tp[1]} in group {self.group_id} "
                    f"and auto_offset_reset is none")

    def _group_positions(self, partitions) -> dict:
        out = {}
        for tp in partitions:
            state = self._states.get(_tp(tp))
            if state is not None and state.position is not None:
                out[(state.tp.topic, state.tp.partition)] = state.position
        return out

    def _group_step(self) -> None:
        group = self._group
        if group is None:
            return
        group.step()
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit:
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_s
            positions = self._group_positions(self._states)
            if positions and group.stable:
                if hasattr(group, "commit_async"):   # never waits inside poll
                    group.commit_async(positions, _log_failed_commit)
                    return
                try:
                    group.commit_offsets(positions)
                except Exception as e:   # the coordinator is away: the next one will do
                    log.warning("auto-commit of group %s failed: %s", self.group_id, e)


def _log_failed_commit(offsets, exception) -> None:
    if exception is not None:
        log.warning("auto-commit failed (the next one will try again): %s", exception)
