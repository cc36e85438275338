"""A consumer's membership of a group kept by the brokers' group coordinator, with
KIP-848's protocol (ConsumerGroupHeartbeat): the shell of
``node.core.consumer_member``. The consumer's default (``group_protocol="consumer"``,
Kafka 4's name); the Kafka paper's ZooKeeper groups are ``node.client.group``.

Threads: everything runs in the consumer's one thread, on its ``Network``. A heartbeat
is sent without waiting (its answer comes back through ``Consumer.poll``, which hands
it to ``on_completion``); an offset fetch for new partitions and a synchronous commit
wait (with the coordinator's retries, ``node.client.coordinator``). As the ZooKeeper
groups here, the heartbeats are sent from ``poll``: a consumer that stops polling
stops heartbeating, and the coordinator ends its membership after
``group.consumer.session.timeout.ms`` (Kafka's consumer heartbeats from a thread of its
own, and leaves the group itself when ``max.poll.interval.ms`` passes between polls).

Offsets: commits carry the member id and epoch (the coordinator refuses a stale or
fenced member's: STALE_MEMBER_EPOCH is retried after the next heartbeat, as Kafka's
consumer does); a new partition starts at the group's committed offset, else at
``auto_offset_reset``.
"""
from __future__ import annotations

import concurrent.futures
import logging
import re
import time
import uuid

from node.client import coordinator as coord
from node.client.coordinator import GroupApi, GroupErrors, GroupRequestError
from node.core import consumer_member as member_core
from node.core.group import Subscription
from node.wire.errors import KafkaError

log = logging.getLogger("minikafka.consumer")

PATTERN_REFRESH_MS = 5_000      # how often a pattern subscription looks for new topics
LEAVE_TIMEOUT_MS_MAX = 5_000    # close() waits this long at most for the leave's answer
STALE_RETRIES_MAX = 20          # commits retried after STALE_MEMBER_EPOCH


class _Heartbeat:
    """The context of a heartbeat in flight."""


class _AsyncCommit:
    def __init__(self, future, offsets: dict):
        self.future = future
        self.offsets = offsets


GROUP_CONTEXTS = (_Heartbeat, _AsyncCommit)    # the Consumer's poll hands these back


class BrokerGroupMember:
    """One consumer's KIP-848 membership (module docstring). ``consumer`` is the
    ``node.client.Consumer`` whose assignment this drives (its ``_group_*`` hooks)."""

    def __init__(self, consumer, group_id: str, *, client_id: str, auto_commit: bool,
                 rebalance_timeout_ms: int, server_assignor: str | None = None,
                 instance_id: str | None = None):
        self.consumer = consumer
        self.group_id = group_id
        self.client_id = client_id
        self.coordinators = coord.Coordinators(
            consumer.net, consumer.meta, request_timeout_ms=consumer.request_timeout_ms,
            retry_backoff_ms=int(consumer.retry_backoff_s * 1000))
        self.core = member_core.MemberCore(
            group_id, str(uuid.uuid4()), rebalance_timeout_ms=rebalance_timeout_ms,
            retry_backoff_ms=int(consumer.retry_backoff_s * 1000),
            server_assignor=server_assignor, auto_commit=auto_commit,
            instance_id=instance_id)
        self.subscription: Subscription | None = None
        self.listener = None
        self._pattern_next_s = 0.0
        self._names: dict[str, str] = {}      # topic id -> name, as metadata said
        self._stepping = False
        self._fatal: GroupRequestError | None = None
        self.rebalance_started_s: float | None = None
        self.last_rebalance_ms: float | None = None

    @property
    def member_id(self) -> str:
        return self.core.member_id

    @property
    def stable(self) -> bool:
        return self.core.state is member_core.State.STABLE

    # ------------------------------------------------------------- subscribing
    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        from node.client.group import GroupError
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise GroupError(f"subscription pattern {pattern!r}: {e}") from None
            self.subscription = Subscription(pattern=pattern)
            self._pattern_next_s = 0.0
        else:
            topics = frozenset(topics)
            if not topics:
                raise GroupError("subscribe() needs topics or a pattern")
            self.subscription = Subscription(topics)
        self.listener = listener
        self._resubscribe()
        self.step()

    def _resubscribe(self) -> None:
        sub = self.subscription
        if sub.pattern is None:
            names = sub.topics
        else:
            names = self._pattern_names()
            if names is None:
                return
        self._learn_names()
        self.core.subscribe(names, _now_ms())

    def _pattern_names(self) -> list[str] | None:
        """The topics the pattern matches now (None: metadata failed), resolved here as
        Kafka's consumer does for a java.util.regex pattern; internal topics never."""
        sub = self.subscription
        self._pattern_next_s = time.monotonic() + PATTERN_REFRESH_MS / 1000
        try:
            md = self.consumer.meta.refresh(None)
        except KafkaError as e:
            log.debug("metadata for pattern %s failed: %s", sub.pattern, e)
            return None
        return [t for t in md.topics if sub.matches(t) and not t.startswith("__")]

    def _learn_names(self) -> None:
        """Topic id -> name from metadata, kept (a partition owned of a topic deleted
        since is still named when it is revoked)."""
        self._names.update({i: t for t, i in self.consumer.meta.current.topic_ids.items()})
        self.core.names_known(dict(self._names), _now_ms())

    def _name(self, tp) -> tuple[str, int]:
        return self._names[tp[0]], tp[1]

    # ------------------------------------------------------------- stepping
    def step(self) -> None:
        """Send a heartbeat when one is due and carry out what the core asks."""
        if self._fatal is not None:
            raise self._fatal
        if self.subscription is None or self._stepping:
            return
        self._stepping = True
        try:
            self._take_set_aside()
            if self.subscription.pattern is not None and \
                    time.monotonic() >= self._pattern_next_s:
                self._resubscribe()
            self._run_actions()
            self._send_due(_now_ms())
            self._run_actions()
        finally:
            self._stepping = False
        if self._fatal is not None:
            raise self._fatal

    def _send_due(self, now_ms: int) -> None:
        if not self.core.heartbeat_due(now_ms):
            return
        body = self.core.heartbeat_request(now_ms)
        if self.core.member_epoch == 0 and self.rebalance_started_s is None:
            self.rebalance_started_s = time.monotonic()
        self._send(GroupApi.CONSUMER_GROUP_HEARTBEAT, body)

    def _send(self, api_key: int, body: dict, timeout_ms: int | None = None) -> None:
        """Send without waiting; the answer comes back through ``on_completion``."""
        try:
            endpoint = self.coordinators.find(
                self.group_id, time.monotonic() + self.consumer.request_timeout_ms / 1000)
            self.consumer.net.send(endpoint, api_key, body, context=_Heartbeat(),
                                   timeout_ms=timeout_ms)
        except KafkaError as e:
            code = int(getattr(e, "code", GroupErrors.COORDINATOR_NOT_AVAILABLE))
            log.debug("group %s: %s not sent: %s", self.group_id, GroupApi(api_key).name, e)
            self.core.on_failure(_now_ms(), code)
            if code not in coord.RETRIABLE:     # no coordinator will ever be found here
                self._fatal = GroupRequestError(code, f"group {self.group_id}: {e}")

    def on_completion(self, completion) -> None:
        """An answer (or the failure) of a request this member sent without waiting."""
        if isinstance(completion.context, _AsyncCommit):
            self._on_async_commit(completion)
            return
        if not self.core.in_flight:
            return        # answered after a close
        if completion.response is None:
            self.core.on_failure(_now_ms(), completion.error_code)
        else:
            body = completion.response.body
            code = coord.refused(body)
            if code:       # the broker refused the request itself: an error to the core
                body = {"error_code": code, "error_message": body.get("error_message")}
            self.core.on_response(_now_ms(), body)
        self.step()

    def _run_actions(self) -> None:
        for _ in range(100):   # a bound: each round is what one answer asked
            actions = self.core.take_actions()
            if not actions:
                return
            for action in actions:
                self._do(action)

    def _do(self, action) -> None:
        if isinstance(action, member_core.Commit):
            try:
                self.commit_offsets(self.consumer._group_positions(
                    [self._name(tp) for tp in action.partitions]))
            except KafkaError as e:   # Kafka's consumer revokes anyway
                log.warning("group %s: commit before revocation failed: %s",
                            self.group_id, e)
        elif isinstance(action, (member_core.Revoke, member_core.Lose)):
            self.rebalance_started_s = self.rebalance_started_s or time.monotonic()
            tps = {self._name(tp) for tp in action.partitions}
            self.consumer._group_revoke(tps)
            if self.listener is not None:
                if isinstance(action, member_core.Lose):
                    self.listener.on_partitions_lost(_tps(tps))
                else:
                    self.listener.on_partitions_revoked(_tps(tps))
        elif isinstance(action, member_core.Assign):
            tps = {self._name(tp) for tp in action.partitions}
            offsets = self.committed_offsets(tps)
            self.consumer._group_assign(tps, offsets)
            if self.rebalance_started_s is not None:
                self.last_rebalance_ms = (time.monotonic() - self.rebalance_started_s) * 1000
                self.rebalance_started_s = None
            if self.listener is not None:
                self.listener.on_partitions_assigned(_tps(tps))
        elif isinstance(action, member_core.NeedMetadata):
            try:
                self.consumer.meta.refresh(sorted(self.core.topics))
            except KafkaError as e:
                log.debug("group %s: metadata refresh failed: %s", self.group_id, e)
            self._learn_names()
        elif isinstance(action, member_core.FindCoordinator):
            self.coordinators.forget(self.group_id)
        elif isinstance(action, member_core.Fatal):
            self._fatal = GroupRequestError(action.error_code, f"group {self.group_id}: "
                                                               f"{action.message}")
        else:
            raise AssertionError(f"unknown action {action!r}")

    # ------------------------------------------------------------- offsets
    def _epoch(self) -> int:
        """What OffsetCommit/OffsetFetch carry: the member epoch (the generation in a
        classic group)."""
        return self.core.member_epoch

    def committed_offsets(self, partitions) -> dict:
        """{tp: committed offset} of ``partitions`` (those with none are left out)."""
        body = coord.offset_fetch_body(self.group_id, partitions,
                                       member_id=self.member_id, epoch=self._epoch())
        answer = self.coordinators.request(self.group_id, GroupApi.OFFSET_FETCH, body,
                                           error_of=coord.offset_fetch_error)
        return coord.offset_fetch_offsets(answer)

    def commit_offsets(self, offsets: dict) -> dict:
        """Write {tp: offset}; returns what was written. A stale epoch is retried after
        a heartbeat; another error is raised (CommitFailed as Kafka's, for a fenced
        member: its partitions are someone else's by now)."""
        if not offsets:
            return {}
        deadline_s = time.monotonic() + self.consumer.request_timeout_ms / 1000
        for _ in range(STALE_RETRIES_MAX):
            body = coord.offset_commit_body(self.group_id, offsets,
                                            member_id=self.member_id, epoch=self._epoch())
            answer = self.coordinators.request(
                self.group_id, GroupApi.OFFSET_COMMIT, body, deadline_s=deadline_s,
                error_of=lambda b: coord.first_error(coord.offset_commit_errors(b).values()))
            codes = coord.offset_commit_errors(answer)
            code = coord.first_error(codes.values())
            if code == GroupErrors.STALE_MEMBER_EPOCH and time.monotonic() < deadline_s:
                self._wait_heartbeat(deadline_s)
                continue
            if code:
                raise GroupRequestError(code, f"commit of group {self.group_id} failed")
            return dict(offsets)
        raise GroupRequestError(GroupErrors.STALE_MEMBER_EPOCH,
                                f"commit of group {self.group_id}: the epoch kept moving")

    def _wait_heartbeat(self, deadline_s: float) -> None:
        """Send a heartbeat now and wait for its answer (a newer member epoch); not
        while leaving (that heartbeat would be the leave)."""
        if self.core.state is member_core.State.LEAVING:
            raise GroupRequestError(GroupErrors.STALE_MEMBER_EPOCH,
                                    f"commit of group {self.group_id} while leaving")
        self.core.next_heartbeat_ms = _now_ms()
        self.step()
        self._wait_answer(deadline_s)

    def _take_set_aside(self) -> bool:
        """Handle the answers of ours a blocking call set aside (a loop of commits
        without a poll must go on heartbeating); True if there were any."""
        net = self.consumer.net
        ours = [c for c in net.backlog if isinstance(c.context, GROUP_CONTEXTS)]
        if ours:
            net.backlog = [c for c in net.backlog if not isinstance(c.context, GROUP_CONTEXTS)]
            for c in ours:
                self.on_completion(c)
        return bool(ours)

    def _wait_answer(self, deadline_s: float) -> None:
        """Handle group answers until nothing of ours is in flight (or the deadline):
        first those a blocking call set aside, then new ones."""
        while self.core.in_flight and time.monotonic() < deadline_s:
            if self._take_set_aside():
                continue
            for c in self.consumer.net._poll_aside(50):
                if isinstance(c.context, (_Heartbeat, _AsyncCommit)):
                    self.on_completion(c)
                else:
                    self.consumer.net.backlog.append(c)   # the consumer's: for its poll

    def commit_async(self, offsets: dict, callback=None):
        """Send an OffsetCommit without waiting; a Future of the offsets, completed in
        ``poll`` (an error is not retried: the next commit carries newer offsets)."""
        future = concurrent.futures.Future()
        if callback is not None:
            future.add_done_callback(lambda f: callback(dict(offsets), f.exception()))
        if not offsets:
            future.set_result({})
            return future
        try:
            endpoint = self.coordinators.find(self.group_id)
            self.consumer.net.send(endpoint, GroupApi.OFFSET_COMMIT, coord.offset_commit_body(
                self.group_id, offsets, member_id=self.member_id, epoch=self._epoch()),
                context=_AsyncCommit(future, dict(offsets)))
        except KafkaError as e:
            future.set_exception(e)
        return future

    def _on_async_commit(self, completion) -> None:
        ctx = completion.context
        if completion.response is None:
            ctx.future.set_exception(GroupRequestError(completion.error_code,
                                                       completion.error_message))
            return
        body = completion.response.body
        code = coord.refused(body) or \
            coord.first_error(coord.offset_commit_errors(body).values())
        if code in coord.REDISCOVER:
            self.coordinators.forget(self.group_id)
        if code:
            ctx.future.set_exception(GroupRequestError(code, f"async commit of group "
                                                             f"{self.group_id} failed"))
        else:
            ctx.future.set_result(ctx.offsets)

    # ------------------------------------------------------------- leaving
    def close(self) -> None:
        """Commit (auto-commit) and revoke, then heartbeat with epoch -1 so the
        coordinator moves the partitions at once."""
        if self.subscription is None or self.core.state is member_core.State.LEFT:
            return
        # A heartbeat still out may carry a newer epoch (an acknowledged revocation):
        # its answer first, so that the commit before leaving carries that epoch.
        self._wait_answer(time.monotonic() + LEAVE_TIMEOUT_MS_MAX / 1000)
        self.core.in_flight = False       # not answered in time: not waited for
        self.core.leave(_now_ms())
        try:
            self._run_actions()
        except KafkaError as e:
            log.warning("group %s: leaving: %s", self.group_id, e)
        if self.core.state is not member_core.State.LEAVING:
            return
        body = self.core.heartbeat_request(_now_ms())
        timeout_ms = min(self.consumer.request_timeout_ms, LEAVE_TIMEOUT_MS_MAX)
        try:     # a coordinator that moved is found again, within the leave's time
            answer = self.coordinators.request(
                self.group_id, GroupApi.CONSUMER_GROUP_HEARTBEAT, body,
                deadline_s=time.monotonic() + timeout_ms / 1000)
            self.core.on_response(_now_ms(), answer)
        except KafkaError as e:   # the session timeout will end the membership
            log.warning("group %s: the leave was not answered: %s", self.group_id, e)
            self.core.on_failure(_now_ms(), int(getattr(e, "code", 13)))


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _tps(partitions) -> set:
    from node.client.types import TopicPartition
    return {TopicPartition(t, p) for t, p in partitions}
