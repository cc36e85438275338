"""A consumer's membership of a classic group kept by the brokers' group coordinator
(``group_protocol="classic"``: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, the range
assignor run by the group's leader, eager rebalancing), the shell of
``node.core.classic_member``. It is ``node.client.broker_group``'s shell with another
core: the same threads (everything in ``poll``, requests sent without waiting), the
same offsets (OffsetCommit / OffsetFetch, carrying the generation), the same
coordinator retries.

A JoinGroup waits at the coordinator until the rebalance completes (up to the
rebalance timeout, ``max_poll_interval_ms``): its request timeout is that plus
``JOIN_SLACK_MS``, as Kafka's consumer sets it.
"""
from __future__ import annotations

import time

from node.client.broker_group import BrokerGroupMember, _now_ms
from node.client.coordinator import GroupApi
from node.core import classic_member as classic
from node.wire.errors import KafkaError

JOIN_SLACK_MS = 5_000
HEARTBEAT_INTERVAL_MS = 3_000    # Kafka's heartbeat.interval.ms (a third of the session
#                                  timeout at most here)


class ClassicGroupMember(BrokerGroupMember):
    def __init__(self, consumer, group_id: str, *, client_id: str, auto_commit: bool,
                 rebalance_timeout_ms: int, session_timeout_ms: int,
                 heartbeat_interval_ms: int = HEARTBEAT_INTERVAL_MS,
                 instance_id: str | None = None):
        super().__init__(consumer, group_id, client_id=client_id, auto_commit=auto_commit,
                         rebalance_timeout_ms=rebalance_timeout_ms)
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.core = classic.ClassicMemberCore(
            group_id, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            heartbeat_interval_ms=min(heartbeat_interval_ms, session_timeout_ms // 3),
            retry_backoff_ms=int(consumer.retry_backoff_s * 1000), auto_commit=auto_commit,
            instance_id=instance_id)
        self._counts_next_s = 0.0

    @property
    def stable(self) -> bool:
        return self.core.stable

    def _epoch(self) -> int:
        return self.core.generation

    def _learn_names(self) -> None:
        pass                            # classic assignments name topics

    def _name(self, tp) -> tuple[str, int]:
        return tp

    def _send_due(self, now_ms: int) -> None:
        request = self.core.next_request(now_ms)
        if request is None:
            return
        api_key, body = request
        if api_key == classic.JOIN_GROUP and self.rebalance_started_s is None:
            self.rebalance_started_s = time.monotonic()
        timeout_ms = None
        if api_key in (classic.JOIN_GROUP, classic.SYNC_GROUP):
            timeout_ms = max(self.consumer.request_timeout_ms,
                             self.rebalance_timeout_ms + JOIN_SLACK_MS)
        self._send(api_key, body, timeout_ms)

    def step(self) -> None:
        """And, on the leader, a look at the partition counts every few seconds."""
        from node.client.broker_group import PATTERN_REFRESH_MS
        counts = self.core.assigned_counts
        if self.core.leader and counts is not None and not self._stepping and \
                time.monotonic() >= self._counts_next_s:
            self._counts_next_s = time.monotonic() + PATTERN_REFRESH_MS / 1000
            try:
                md = self.consumer.meta.refresh(sorted(counts))
                self.core.counts_changed({t: md.partition_count(t) or 0 for t in counts},
                                         _now_ms())
            except KafkaError:
                pass                       # looked at again next time
        super().step()

    def _do(self, action) -> None:
        if isinstance(action, classic.NeedPartitionCounts):
            counts = {}
            try:
                md = self.consumer.meta.refresh(sorted(action.topics))
                counts = {t: md.partition_count(t) or 0 for t in action.topics}
            except KafkaError as e:    # assign what is known; the next rebalance the rest
                self.consumer._metadata_wanted = True
                counts = {t: self.consumer.meta.current.partition_count(t) or 0
                          for t in action.topics}
                del e
            self.core.partition_counts(counts, _now_ms())
            return
        super()._do(action)

    def _resubscribe(self) -> None:
        sub = self.subscription
        if sub.pattern is None:
            names = sub.topics
        else:
            names = self._pattern_names()
            if names is None:
                return
        self.core.subscribe(names, _now_ms())

    def close(self) -> None:
        """Commit (auto-commit) and revoke, then LeaveGroup so the group rebalances at
        once."""
        from node.client.broker_group import LEAVE_TIMEOUT_MS_MAX, log
        if self.subscription is None or self.core.state is classic.State.LEFT:
            return
        self.core.leave(_now_ms())
        try:
            self._run_actions()
        except KafkaError as e:
            log.warning("group %s: leaving: %s", self.group_id, e)
        request = self.core.next_request(_now_ms())
        if request is None:
            return
        timeout_ms = min(self.consumer.request_timeout_ms, LEAVE_TIMEOUT_MS_MAX)
        try:
            answer = self.coordinators.request(
                self.group_id, GroupApi.LEAVE_GROUP, request[1],
                deadline_s=time.monotonic() + timeout_ms / 1000)
            self.core.on_response(_now_ms(), answer)
        except KafkaError as e:
            log.warning("group %s: the leave was not answered: %s", self.group_id, e)
            self.core.on_failure(_now_ms(), int(getattr(e, "code", 13)))
