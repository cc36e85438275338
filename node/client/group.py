"""A consumer's membership of a group: the shell of ``node.core.group`` (the Kafka
paper's rebalance) over the coordinator, as Kafka 0.8's ZooKeeper consumer kept it
(``Consumer(group_protocol="zookeeper")``; the brokers' groups are
``node.client.broker_group`` and ``node.client.classic_group``).

Registries (Kafka 0.8's layout and values):

    /consumers/G/ids/<consumer id>       ephemeral  {"version": 1, "subscription":
                                                     {topic or pattern: 1}, "pattern":
                                                     "static" | "white_list",
                                                     "timestamp": ms, "host", "client_id"}
    /consumers/G/owners/<topic>/<p>      ephemeral  the owner's consumer id
    /consumers/G/offsets/<topic>/<p>     persistent the next offset to read, as text

Threads: kazoo's watch and session callbacks only set flags; everything else (the
core's events, the coordinator calls its actions need, the consumer's assignment) runs
in the thread that calls ``Consumer.poll`` / ``commit`` / ``close`` — the consumer's one
thread. ``step()`` runs the core until it waits for a timer or is stable.

Commits are guarded: a partition's offset is written only while this member's
ownership node is there with its id, so a member that lost a partition (its session
ended while it was paused) cannot overwrite the new owner's progress. Between that
read and the write another member could in principle take the partition; Kafka 0.8
had the same window and no guard at all.
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid

from node.core import group

ROOT = "/consumers"
SESSION_TIMEOUT_MS = 6_000       # Kafka 0.8's zookeeper.session.timeout.ms
CONNECT_TIMEOUT_S = 10.0
STEPS_MAX = 1_000                # core events handled in one step (a bound, not a goal)


class GroupError(RuntimeError):
    """The group cannot work: no coordinator, a bad group id or subscription."""


def check_group_id(group_id: str) -> None:
    if not group_id or len(group_id) > 249 or "/" in group_id or group_id in (".", "..") \
            or not group_id.isprintable():
        raise GroupError(f"invalid group id {group_id!r}: 1..249 printable characters "
                         f"without '/'")


def paths(group_id: str) -> tuple[str, str, str]:
    base = f"{ROOT}/{group_id}"
    return f"{base}/ids", f"{base}/owners", f"{base}/offsets"


def decode_subscription(data: bytes) -> group.Subscription:
    """A consumer registry entry's subscription (Kafka 0.8's JSON)."""
    return subscription_of(json.loads(data))


def subscription_of(entry: dict) -> group.Subscription:
    subscription = entry.get("subscription") or {}
    if entry.get("pattern") in ("white_list", "black_list"):
        pattern = "|".join(f"(?:{p})" for p in subscription) or "(?!)"
        return group.Subscription(pattern=pattern)
    return group.Subscription(frozenset(subscription))


class GroupMember:
    """One consumer's membership. ``consumer`` is the ``node.client.Consumer`` whose
    assignment this drives (through its ``_group_*`` hooks)."""

    def __init__(self, consumer, group_id: str, zookeeper: str, *, client_id: str,
                 session_timeout_ms: int = SESSION_TIMEOUT_MS,
                 rebalance_backoff_ms: int = 250, auto_commit: bool = True):
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError
        from kazoo.retry import KazooRetry
        check_group_id(group_id)
        self.consumer = consumer
        self.group_id = group_id
        self.member_id = f"{client_id}-{uuid.uuid4()}"
        self.client_id = client_id
        self.ids, self.owners, self.offsets = paths(group_id)
        self.core = group.GroupCore(self.member_id, backoff_ms=rebalance_backoff_ms,
                                auto_commit=auto_commit)
        self.subscription: group.Subscription | None = None
        self.listener = None
        self._changed = threading.Event()
        self._lost = threading.Event()
        self._backoff_until: float | None = None
        self._stray: set = set()
        self._stepping = False
        self._registered_session = None
        self.zk = KazooClient(hosts=zookeeper, timeout=session_timeout_ms / 1000,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.1,
                                                          max_delay=1.0))
        try:   # waiting longer than a session lasts is pointless
            self.zk.start(timeout=min(CONNECT_TIMEOUT_S, session_timeout_ms / 1000))
        except KazooTimeoutError:
            self.zk.close()
            raise GroupError(f"cannot reach the coordinator at {zookeeper} (group "
                             f"{group_id})") from None
        self.zk.add_listener(self._on_state)
        self.rebalance_started_s: float | None = None
        self.last_rebalance_ms: float | None = None

    @property
    def stable(self) -> bool:
        return self.core.state is group.State.STABLE

    # ------------------------------------------------------------- kazoo's thread
    def _on_state(self, state) -> None:
        from kazoo.protocol.states import KazooState
        if state == KazooState.LOST:
            self._lost.set()

    def _watch(self, _event=None) -> None:
        self._changed.set()

    # ------------------------------------------------------------- the consumer's thread
    def subscribe(self, topics=(), pattern: str | None = None, listener=None) -> None:
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise GroupError(f"subscription pattern {pattern!r}: {e}") from None
            self.subscription = group.Subscription(pattern=pattern)
        else:
            topics = frozenset(topics)
            if not topics:
                raise GroupError("subscribe() needs topics or a pattern")
            self.subscription = group.Subscription(topics)
        self.listener = listener
        if self._registered_session is None:
            self.core.join()
        else:
            self.core.resubscribed()
        self.step()

    def step(self) -> None:
        """Feed the core what happened since the last step and carry out its actions."""
        if self.subscription is None or not self.zk.connected or self._stepping:
            return      # nothing to do, the coordinator is away (the flags wait), or a
            #             listener called back into the consumer during a step
        self._stepping = True
        try:
            self._step()
        finally:
            self._stepping = False

    def _step(self) -> None:
        if self._lost.is_set():
            self._lost.clear()
            self._registered_session = None
            self._backoff_until = None
            self.core.session_lost()
        if self._changed.is_set():
            self._changed.clear()
            self.core.changed()
        if self._backoff_until is not None and time.monotonic() >= self._backoff_until:
            self._backoff_until = None
            self.core.backoff_elapsed()
        for _ in range(STEPS_MAX):
            actions = self.core.take_actions()
            if not actions:
                return
            for action in actions:
                self._execute(action)

    def _execute(self, action) -> None:
        from kazoo.exceptions import KazooException
        try:
            self._do(action)
        except KazooException:
            # The coordinator is away: try the rebalance again when it is back (the
            # session listener reports a lost session; otherwise a changed() retries).
            self._retry_later(action)

    def _retry_later(self, action) -> None:
        """An action failed on the coordinator: answer the core so it owns nothing, and
        rebalance again at the next step."""
        if isinstance(action, group.ReadRegistries):
            self.core.registries_read({}, {})
        elif isinstance(action, group.Claim):
            self._stray |= action.partitions     # some creates may have landed
            self.core.claimed(frozenset(), frozenset())
        self._changed.set()

    def _do(self, action) -> None:
        if isinstance(action, group.Register):
            self._register()
        elif isinstance(action, group.Commit):
            self.commit_positions(action.partitions)
        elif isinstance(action, group.Revoke):
            self.rebalance_started_s = self.rebalance_started_s or time.monotonic()
            self.consumer._group_revoke(action.partitions)
            if self.listener is not None:
                self.listener.on_partitions_revoked(_tps(action.partitions))
        elif isinstance(action, group.Release):
            self._release(action.partitions)
        elif isinstance(action, group.ReadRegistries):
            self.rebalance_started_s = self.rebalance_started_s or time.monotonic()
            members, partitions = self._read()
            self.core.registries_read(members, partitions)
        elif isinstance(action, group.Claim):
            won, lost = self._claim(action.partitions)
            if self._stray - won:      # claims of a failed attempt we do not want now
                self._release(self._stray - won)
            self._stray = set()
            self.core.claimed(won, lost)
        elif isinstance(action, group.BackOff):
            self._backoff_until = time.monotonic() + action.ms / 1000
        elif isinstance(action, group.Assigned):
            offsets = self.committed_offsets(action.partitions)
            self.consumer._group_assign(action.partitions, offsets)
            if self.rebalance_started_s is not None:
                self.last_rebalance_ms = (time.monotonic() - self.rebalance_started_s) * 1000
                self.rebalance_started_s = None
            if self.listener is not None:
                self.listener.on_partitions_assigned(_tps(action.partitions))
        else:
            raise AssertionError(f"unknown action {action!r}")

    # ------------------------------------------------------------- registries
    def _register(self) -> None:
        from kazoo.exceptions import NodeExistsError
        sub = self.subscription
        entry = {"version": 1, "pattern": "white_list" if sub.pattern else "static",
                 "subscription": {sub.pattern: 1} if sub.pattern else
                 {t: 1 for t in sorted(sub.topics)},
                 "timestamp": str(int(time.time() * 1000)),
                 "host": f"/{_host()}", "client_id": self.client_id}
        path = f"{self.ids}/{self.member_id}"
        data = json.dumps(entry).encode()
        try:
            self.zk.create(path, data, ephemeral=True, makepath=True)
        except NodeExistsError:
            self.zk.set(path, data)
        self._registered_session = self.zk.client_id

    def _read(self) -> tuple[dict, dict]:
        from kazoo.exceptions import NoNodeError
        members = {}
        for member in self.zk.get_children(self.ids, watch=self._watch):
            try:
                data, _ = self.zk.get(f"{self.ids}/{member}")
                members[member] = decode_subscription(data)
            except (NoNodeError, ValueError, TypeError, AttributeError):
                continue
        wanted = set()
        if any(s.pattern for s in members.values()) or \
                (self.subscription and self.subscription.pattern):
            wanted |= set(self.zk.get_children("/brokers/topics", watch=self._watch))
        for s in members.values():
            wanted |= s.topics
        partitions = {}
        for topic in sorted(wanted):
            path = f"/brokers/topics/{topic}"
            try:
                data, _ = self.zk.get(path, watch=self._watch)
            except NoNodeError:
                self.zk.exists(path, watch=self._watch)
                continue
            try:
                partitions[topic] = len(json.loads(data)["partitions"])
            except (ValueError, KeyError, TypeError):
                continue
        return members, partitions

    def _claim(self, wanted: frozenset) -> tuple[frozenset, frozenset]:
        from kazoo.exceptions import NodeExistsError, NoNodeError
        won, lost = set(), set()
        for topic, partition in sorted(wanted):
            path = f"{self.owners}/{topic}/{partition}"
            try:
                self.zk.create(path, self.member_id.encode(), ephemeral=True, makepath=True)
                won.add((topic, partition))
            except NodeExistsError:
                try:
                    holder, _ = self.zk.get(path)
                except NoNodeError:
                    holder = b""
                (won if holder.decode() == self.member_id else lost).add((topic, partition))
        return frozenset(won), frozenset(lost)

    def _release(self, partitions) -> None:
        from kazoo.exceptions import NoNodeError
        for topic, partition in partitions:
            path = f"{self.owners}/{topic}/{partition}"
            try:
                holder, stat = self.zk.get(path)
                if holder.decode() == self.member_id:
                    self.zk.delete(path, version=stat.version)
            except NoNodeError:
                pass

    # ------------------------------------------------------------- offsets
    def committed_offsets(self, partitions) -> dict:
        from kazoo.exceptions import NoNodeError
        out = {}
        for topic, partition in partitions:
            try:
                data, _ = self.zk.get(f"{self.offsets}/{topic}/{partition}")
                out[(topic, partition)] = int(data)
            except (NoNodeError, ValueError):
                continue
        return out

    def commit_offsets(self, offsets: dict) -> dict:
        """Write {tp: offset} for the partitions this member owns now; the written
        ones are returned (the others are not ours any more)."""
        from kazoo.exceptions import NodeExistsError, NoNodeError
        written = {}
        for (topic, partition), offset in offsets.items():
            try:
                holder, _ = self.zk.get(f"{self.owners}/{topic}/{partition}")
            except NoNodeError:
                continue
            if holder.decode() != self.member_id:
                continue
            path = f"{self.offsets}/{topic}/{partition}"
            data = str(int(offset)).encode()
            try:
                self.zk.set(path, data)
            except NoNodeError:
                try:
                    self.zk.create(path, data, makepath=True)
                except NodeExistsError:
                    self.zk.set(path, data)
            written[(topic, partition)] = offset
        return written

    def commit_positions(self, partitions) -> dict:
        positions = self.consumer._group_positions(partitions)
        return self.commit_offsets(positions) if positions else {}

    # ------------------------------------------------------------- leaving
    def close(self) -> None:
        """Commit (auto-commit), revoke and release at once, then end the session (the
        registration goes with it and the others rebalance)."""
        from kazoo.exceptions import KazooException
        try:
            if self.subscription is not None and self.zk.connected:
                self.core.leave()
                for action in self.core.take_actions():
                    self._do(action)
        except KazooException:
            pass
        finally:
            try:
                self.zk.stop()
            finally:
                self.zk.close()


def _tps(partitions) -> set:
    from node.client.types import TopicPartition
    return {TopicPartition(t, p) for t, p in partitions}


def _host() -> str:
    try:
        return socket.gethostbyname("localhost")
    except OSError:
        return "127.0.0.1"



# ------------------------------------------------------------------ the tools' view

class GroupView:
    """What the registries say about a group: members {id: registry entry}, owners
    {tp: member id}, committed offsets {tp: offset}."""

    def __init__(self, group_id: str, members: dict, owners: dict, offsets: dict,
                 partitions: dict):
        self.group_id = group_id
        self.members = members
        self.owners = owners
        self.offsets = offsets
        self.partitions = partitions      # {topic: count} of the subscribed topics

    @property
    def state(self) -> str:
        """Kafka's group state names: Empty (no member), Stable (every subscribed
        partition owned by a member), PreparingRebalance (a rebalance is under way)."""
        if not self.members:
            return "Empty"
        subs = {m: subscription_of(e) for m, e in self.members.items()}
        wanted = {(t, p) for t, n in self.partitions.items() for p in range(n)
                  if any(s.matches(t) for s in subs.values())}
        owned = {tp for tp, m in self.owners.items() if m in self.members}
        return "Stable" if owned == wanted else "PreparingRebalance"


def list_groups(zk) -> list[str]:
    from kazoo.exceptions import NoNodeError
    try:
        return sorted(zk.get_children(ROOT))
    except NoNodeError:
        return []


def read_group(zk, group_id: str) -> GroupView | None:
    """The group's registries, or None if the group has none."""
    from kazoo.exceptions import NoNodeError
    check_group_id(group_id)
    ids, owners_path, offsets_path = paths(group_id)
    if zk.exists(f"{ROOT}/{group_id}") is None:
        return None

    def children(path: str) -> list[str]:
        try:
            return zk.get_children(path)
        except NoNodeError:
            return []

    def data(path: str) -> bytes | None:
        try:
            return zk.get(path)[0]
        except NoNodeError:
            return None

    members = {}
    for member in children(ids):
        raw = data(f"{ids}/{member}")
        try:
            members[member] = json.loads(raw) if raw is not None else None
        except ValueError:
            continue
    members = {m: e for m, e in members.items() if isinstance(e, dict)}
    owners, offsets = {}, {}
    for topic in children(owners_path):
        for p in children(f"{owners_path}/{topic}"):
            raw = data(f"{owners_path}/{topic}/{p}")
            if raw is not None and p.isdigit():
                owners[(topic, int(p))] = raw.decode()
    for topic in children(offsets_path):
        for p in children(f"{offsets_path}/{topic}"):
            raw = data(f"{offsets_path}/{topic}/{p}")
            try:
                offsets[(topic, int(p))] = int(raw)
            except (TypeError, ValueError):
                continue
    topics = set(zk.get_children("/brokers/topics")) if zk.exists("/brokers/topics") else set()
    partitions = {}
    for topic in sorted(topics):
        if not any(subscription_of(e).matches(topic)
                   for e in members.values()) and \
                not any(t == topic for t, _ in list(owners) + list(offsets)):
            continue
        raw = data(f"/brokers/topics/{topic}")
        try:
            partitions[topic] = len(json.loads(raw)["partitions"])
        except (TypeError, ValueError, KeyError):
            continue
    return GroupView(group_id, members, owners, offsets, partitions)


def write_offsets(zk, group_id: str, offsets: dict) -> None:
    """Set committed offsets {tp: offset} (the tools' --reset-offsets)."""
    from kazoo.exceptions import NodeExistsError, NoNodeError
    _, _, base = paths(group_id)
    for (topic, partition), offset in sorted(offsets.items()):
        path = f"{base}/{topic}/{partition}"
        value = str(int(offset)).encode()
        try:
            zk.set(path, value)
        except NoNodeError:
            try:
                zk.create(path, value, makepath=True)
            except NodeExistsError:
                zk.set(path, value)


def delete_group(zk, group_id: str) -> None:
    check_group_id(group_id)
    zk.delete(f"{ROOT}/{group_id}", recursive=True)
