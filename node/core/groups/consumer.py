"""KIP-848 consumer groups (ConsumerGroupHeartbeat) as a pure core: one ``ConsumerGroups``
holds every consumer group of one ``__consumer_offsets`` partition.

Theory of operation (Kafka 4's GroupMetadataManager.consumerGroupHeartbeat):

1. A member heartbeats with its member epoch: 0 to join, -1 to leave, -2 for a static
   member leaving for a while (its place and partitions are kept until its session
   expires), else the epoch it was last given. A heartbeat may carry the member's
   subscription, assignor, rebalance timeout and owned partitions, or leave any of them
   out (None: unchanged).
2. A changed subscription, or a change of the subscribed topics' partition counts (a
   topic created, deleted or grown: ``metadata_changed``), bumps the *group epoch*. A
   member leaving, fenced or expiring bumps it too.
3. When the group epoch is ahead of the *assignment epoch*, the server assignor (``uniform``
   or ``range``; the one most members ask for) computes a new *target assignment* and the
   assignment epoch catches up.
4. Each member then moves towards its target at its own pace (``reconcile``): it revokes
   first, and only gets partitions no other member owns any more; its *member epoch*
   becomes the target epoch once it has nothing left to revoke.
5. Timers: a member that does not heartbeat within the session timeout is fenced (its
   partitions go back to the group); a member that does not revoke within its rebalance
   timeout is fenced too.

Every change is a record (``consumer_state``), applied as it is made; ``replay`` applies a
loaded one, so a coordinator rebuilt from the partition continues at the same epochs. The
calls return the records (``Out.records``) for the shell to append before it answers.
Errors are Kafka's: a heartbeat that breaks the rules gets its error code and a message, and
changes nothing.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from node.core.groups import consumer_state as cs
from node.core.groups.assignors import ASSIGNORS, MemberSpec
from node.core.groups.config import GroupConfig
from node.core.groups.consumer_rules import (  # noqa: F401 (the codes are this API's too)
    COORDINATOR_LOAD_IN_PROGRESS, FENCED_INSTANCE_ID, FENCED_MEMBER_EPOCH, GROUP_ID_NOT_FOUND,
    GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, NON_EMPTY_GROUP, NONE, STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID, UNRELEASED_INSTANCE_ID, UNSUPPORTED_ASSIGNOR, UNSUPPORTED_VERSION,
    GroupError, validate_heartbeat)
from node.core.groups.consumer_state import (
    LEAVE_GROUP_EPOCH, LEAVE_STATIC_EPOCH, UNKNOWN_STATE, UNREVOKED_PARTITIONS, Group, Member,
    Rec)
from node.core.groups.reconcile import is_subset, next_member, parts_of
from node.wire.zkdata import topic_id_text

PROTOCOL_TYPE = "consumer"               # ConsumerProtocol.PROTOCOL_TYPE, as ListGroups shows it
GROUP_TYPE = "consumer"
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
DESCRIBE_GROUPS_NOT_FOUND_VERSION = 6    # DescribeGroups answers GROUP_ID_NOT_FOUND from v6
OFFSET_COMMIT_MODERN_VERSION = 9         # a KIP-848 member commits with OffsetCommit v9+


@dataclass
class Out:
    records: list[Rec]          # already applied here; the shell appends them, then answers
    body: dict | None           # the response body (None where the call has no response)


def random_member_id() -> str:
    """A member id as Kafka makes one (Uuid.randomUuid().toString(): URL-safe base64)."""
    return topic_id_text(uuid.uuid4())


def heartbeat_error(code: int, message: str | None) -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message,
            "member_id": None, "member_epoch": 0, "heartbeat_interval_ms": 0,
            "assignment": None}


class ConsumerGroups:
    """The KIP-848 groups of one shard. Pure: time comes in as ``now_ms``."""

    def __init__(self, config: GroupConfig,
                 new_member_id: Callable[[], str] = random_member_id):
        self.config = config
        self.assignors = config.consumer_assignors
        unknown = [a for a in self.assignors if a not in ASSIGNORS]
        assert not unknown, f"group.consumer.assignors names unknown assignors {unknown}"
        self.new_member_id = new_member_id
        self.groups: dict[str, Group] = {}
        self.topics: dict[str, tuple[str, int]] | None = None   # None until metadata_changed
        self.sessions: dict[tuple[str, str], int] = {}          # (group, member) -> deadline
        self.revocations: dict[tuple[str, str], tuple[int, int]] = {}   # -> (deadline, epoch)
        self._out: list[Rec] = []

    # ---------------------------------------------------------------- records
    def _emit(self, rec: Rec) -> None:
        self._out.append(rec)
        cs.apply(self.groups, rec)

    def _take(self) -> list[Rec]:
        out, self._out = self._out, []
        return out

    def replay(self, rec: Rec) -> None:
        """Applies a record read back from the partition (loading)."""
        cs.apply(self.groups, rec)

    def loaded(self, now_ms: int) -> None:
        """After the last replayed record: every member gets a fresh session (and those still
        revoking a fresh rebalance timeout), as Kafka's onLoaded does."""
        for gid, group in self.groups.items():
            for mid, member in group.members.items():
                self.sessions[(gid, mid)] = now_ms + self.config.group_consumer_session_timeout_ms
                if member.state == UNREVOKED_PARTITIONS:
                    self.revocations[(gid, mid)] = (now_ms + member.rebalance_timeout_ms,
                                                    member.member_epoch)

    # ---------------------------------------------------------------- heartbeat
    def heartbeat(self, now_ms: int, version: int, body: Mapping, client_id: str = "",
                  client_host: str = "") -> Out:
        """ConsumerGroupHeartbeat (api 68); ``body`` has the request's fields."""
        assert not self._out
        try:
            validate_heartbeat(version, body, self.assignors)
            if self.topics is None:
                raise GroupError(COORDINATOR_LOAD_IN_PROGRESS,
                                 "The coordinator has no topic metadata yet.")
            if body["member_epoch"] in (LEAVE_GROUP_EPOCH, LEAVE_STATIC_EPOCH):
                response = self._leave(body)
            else:
                response = self._join_or_heartbeat(now_ms, body, client_id, client_host)
        except GroupError as e:
            assert not self._out, f"records made before the error {e.message}"
            response = heartbeat_error(e.code, e.message)
        return Out(self._take(), response)

    def _join_or_heartbeat(self, now_ms: int, body: Mapping, client_id: str,
                           client_host: str) -> dict:
        gid, epoch = body["group_id"], body["member_epoch"]
        member_id = body.get("member_id") or ""
        owned = parts_of(body.get("topic_partitions"))
        group = self.groups.get(gid)
        if group is None and epoch != 0:
            raise GroupError(GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
        size = len(group.members) if group is not None else 0
        if size >= self.config.group_consumer_max_size and (
                not member_id or member_id not in group.members):
            raise GroupError(GROUP_MAX_SIZE_REACHED,
                             f"The consumer group has reached its maximum capacity of "
                             f"{self.config.group_consumer_max_size} members.")
        if not member_id:
            member_id = self.new_member_id()             # v0: the coordinator names it
        member, replaced = self._member_for(group, gid, member_id, epoch,
                                            body.get("instance_id"), owned)
        if member.state == UNKNOWN_STATE and (owned is None or any(owned.values())):
            raise GroupError(FENCED_MEMBER_EPOCH, "The consumer group member is in an unknown "
                             "state. The member must abandon all its partitions and rejoin.")

        # Records from here on; nothing below raises a GroupError.
        if replaced is not None:
            self._replace_static(gid, replaced, member)
        updated = self._updated(member, body, client_id, client_host)
        bump = False
        if updated != member:
            self._emit(cs.member_metadata_record(gid, member_id, updated))
            bump = updated.subscribed_topic_names != member.subscribed_topic_names
        group = self.groups[gid]
        if bump:
            self._bump(group)
        if group.group_epoch > group.assignment_epoch:
            self._update_target(group)

        current = group.members[member_id]
        if not current.reconciled_to(group.assignment_epoch):
            moved = next_member(current, group.assignment_epoch,
                                group.target.get(member_id, {}), group.partition_epoch, owned)
            if moved != current:
                self._emit(cs.current_assignment_record(gid, member_id, moved))
                if moved.state == UNREVOKED_PARTITIONS:
                    self.revocations[(gid, member_id)] = (
                        now_ms + moved.rebalance_timeout_ms, moved.member_epoch)
                else:
                    self.revocations.pop((gid, member_id), None)
        self.sessions[(gid, member_id)] = now_ms + self.config.group_consumer_session_timeout_ms

        final = group.members[member_id]
        full = epoch == 0 or (body.get("rebalance_timeout_ms", -1) != -1
                              and body.get("subscribed_topic_names") is not None
                              and owned is not None)
        assignment = None
        if full or final.assigned != member.assigned:
            assignment = {"topic_partitions": cs.parts_to_list(final.assigned)}
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "member_id": member_id, "member_epoch": final.member_epoch,
                "heartbeat_interval_ms": self.config.group_consumer_heartbeat_interval_ms,
                "assignment": assignment}

    def _member_for(self, group: Group | None, gid: str, member_id: str, epoch: int,
                    instance_id: str | None, owned) -> tuple[Member, Member | None]:
        """The member the heartbeat is from (a new one when joining), and the static member
        it replaces, if any. Raises the fencing errors."""
        if instance_id is None:
            member = group.members.get(member_id) if group is not None else None
            if member is None:
                if epoch != 0:
                    raise GroupError(UNKNOWN_MEMBER_ID,
                                     f"Member {member_id} is not a member of group {gid}.")
                return Member(member_id), None
            self._check_epoch(member, epoch, owned)
            return member, None
        existing = group.static_member(instance_id) if group is not None else None
        if epoch == 0:
            if existing is None:
                member = group.members.get(member_id) if group is not None else None
                return (member or Member(member_id)), None
            if existing.member_epoch != LEAVE_STATIC_EPOCH:
                raise GroupError(UNRELEASED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} "
                                 f"cannot join the group because the instance id is owned by "
                                 f"{existing.member_id} member.")
            return replace(existing, member_id=member_id, member_epoch=0,
                           previous_member_epoch=0), existing
        if existing is None:
            raise GroupError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
        if existing.member_id != member_id:
            raise GroupError(FENCED_INSTANCE_ID,
                             f"Static member {member_id} with instance id {instance_id} was "
                             f"fenced by member {existing.member_id}.")
        self._check_epoch(existing, epoch, owned)
        return existing, None

    @staticmethod
    def _check_epoch(member: Member, received: int, owned) -> None:
        """Kafka's rule: the member's epoch, or its previous one when it owns no more than
        it is assigned (the answer that moved it on was lost)."""
        if received > member.member_epoch:
            raise GroupError(FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a greater member epoch ({received}) "
                             f"than the one known by the group coordinator "
                             f"({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")
        if received < member.member_epoch and (
                received != member.previous_member_epoch
                or not is_subset(owned, member.assigned)):
            raise GroupError(FENCED_MEMBER_EPOCH,
                             f"The consumer group member has a smaller member epoch ({received}) "
                             f"than the one known by the group coordinator "
                             f"({member.member_epoch}). The member must abandon all its "
                             "partitions and rejoin.")

    @staticmethod
    def _updated(member: Member, body: Mapping, client_id: str, client_host: str) -> Member:
        changes: dict = {"client_id": client_id, "client_host": client_host}
        for name in ("instance_id", "rack_id", "server_assignor"):
            if body.get(name) is not None:
                changes[name] = body[name]
        if body.get("rebalance_timeout_ms", -1) != -1:
            changes["rebalance_timeout_ms"] = body["rebalance_timeout_ms"]
        if body.get("subscribed_topic_names") is not None:
            changes["subscribed_topic_names"] = frozenset(body["subscribed_topic_names"])
        return replace(member, **changes)

    def _replace_static(self, gid: str, old: Member, new: Member) -> None:
        """A static member back under a new member id takes the old one's place: its
        assignment and target, at member epoch 0 (Kafka's replaceMember)."""
        target = self.groups[gid].target.get(old.member_id, {})
        for rec in cs.member_tombstones(gid, old.member_id):
            self._emit(rec)
        self._cancel_timers(gid, old.member_id)
        self._emit(cs.member_metadata_record(gid, new.member_id, new))
        self._emit(cs.target_member_record(gid, new.member_id, target))
        self._emit(cs.current_assignment_record(gid, new.member_id, new))

    # ---------------------------------------------------------------- group epoch, target
    def _subscription_metadata(self, group: Group) -> dict[str, tuple[str, int]]:
        known = self.topics if self.topics is not None else group.subscription_metadata
        return {name: known[name] for name in sorted(group.subscribed_names()) if name in known}

    def _bump(self, group: Group) -> None:
        """A new group epoch, with the subscribed topics' metadata as it is now."""
        metadata = self._subscription_metadata(group)
        if metadata != group.subscription_metadata:
            self._emit(cs.partition_metadata_record(group.group_id, metadata))
        self._emit(cs.epoch_record(group.group_id, group.group_epoch + 1))

    def assignor_for(self, group: Group) -> str:
        """The assignor most members ask for (ties: the earlier in group.consumer.assignors);
        else the first configured one."""
        counts: dict[str, int] = {}
        for m in group.members.values():
            if m.server_assignor in self.assignors:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if not counts:
            return self.assignors[0]
        return max(counts, key=lambda name: (counts[name], -self.assignors.index(name)))

    def _update_target(self, group: Group) -> None:
        ids = {name: tid for name, (tid, _) in group.subscription_metadata.items()}
        specs = {m.member_id: MemberSpec(
                     m.member_id, m.instance_id,
                     frozenset(ids[n] for n in m.subscribed_topic_names if n in ids),
                     group.target.get(m.member_id, {}))
                 for m in group.members.values()}
        counts = {tid: n for tid, n in group.subscription_metadata.values()}
        new = ASSIGNORS[self.assignor_for(group)](specs, counts)
        for member_id in sorted(specs):
            if new[member_id] != group.target.get(member_id):
                self._emit(cs.target_member_record(group.group_id, member_id, new[member_id]))
        self._emit(cs.target_epoch_record(group.group_id, group.group_epoch))

    # ---------------------------------------------------------------- leaving, fencing
    def _leave(self, body: Mapping) -> dict:
        gid, member_id, epoch = body["group_id"], body["member_id"], body["member_epoch"]
        instance_id = body.get("instance_id")
        group = self.groups.get(gid)
        if group is None:
            raise GroupError(GROUP_ID_NOT_FOUND, f"Consumer group {gid} not found.")
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise GroupError(UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {gid}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise GroupError(UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            if member.member_id != member_id:
                raise GroupError(FENCED_INSTANCE_ID,
                                 f"Static member {member_id} with instance id {instance_id} "
                                 f"was fenced by member {member.member_id}.")
            if epoch == LEAVE_STATIC_EPOCH:
                # Keeps its place and what it is assigned; nothing left to revoke.
                self._emit(cs.current_assignment_record(gid, member_id, replace(
                    member, member_epoch=LEAVE_STATIC_EPOCH, pending_revocation={})))
                return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                        "member_id": member_id, "member_epoch": LEAVE_STATIC_EPOCH,
                        "heartbeat_interval_ms": 0, "assignment": None}
        self._fence(group, member)
        return {"throttle_time_ms": 0, "error_code": NONE, "error_message": None,
                "member_id": member_id, "member_epoch": epoch, "heartbeat_interval_ms": 0,
                "assignment": None}

    def _fence(self, group: Group, member: Member) -> None:
        """Removes the member: its partitions are free at once, the group epoch moves."""
        for rec in cs.member_tombstones(group.group_id, member.member_id):
            self._emit(rec)
        self._cancel_timers(group.group_id, member.member_id)
        self._bump(group)

    def _cancel_timers(self, gid: str, member_id: str) -> None:
        self.sessions.pop((gid, member_id), None)
        self.revocations.pop((gid, member_id), None)

    # ---------------------------------------------------------------- time, metadata
    def tick(self, now_ms: int) -> list[Rec]:
        """Fences the members whose session expired, or whose revocation took longer than
        their rebalance timeout."""
        assert not self._out
        for key in sorted(k for k, deadline in self.sessions.items() if deadline <= now_ms):
            del self.sessions[key]
            self._fence_if_member(key, None)
        for key in sorted(k for k, (deadline, _) in self.revocations.items()
                          if deadline <= now_ms):
            _, epoch = self.revocations.pop(key)
            self._fence_if_member(key, epoch)
        return self._take()

    def _fence_if_member(self, key: tuple[str, str], epoch: int | None) -> None:
        group = self.groups.get(key[0])
        member = group.members.get(key[1]) if group is not None else None
        if member is not None and (epoch is None or member.member_epoch == epoch):
            self._fence(group, member)

    def next_deadline_ms(self) -> int | None:
        deadlines = list(self.sessions.values()) + [d for d, _ in self.revocations.values()]
        return min(deadlines, default=None)

    def metadata_changed(self, topics: Mapping[str, tuple[str, int]]) -> list[Rec]:
        """The cluster's topics now (name -> (topic id text, partitions)): every group whose
        subscribed topics changed gets a new group epoch (and so a new target)."""
        assert not self._out
        self.topics = dict(topics)
        for gid in sorted(self.groups):
            group = self.groups[gid]
            if self._subscription_metadata(group) != group.subscription_metadata:
                self._bump(group)
        return self._take()

    # ---------------------------------------------------------------- other APIs
    def has(self, group_id: str) -> bool:
        return group_id in self.groups

    def group_ids(self) -> list[str]:
        return sorted(self.groups)

    def is_empty(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is None or group.state == cs.EMPTY

    def subscribed_topics(self, group_id: str) -> set[str]:
        """The topic names the group's members subscribe to (OffsetDelete's check)."""
        group = self.groups.get(group_id)
        return set() if group is None else group.subscribed_names()

    def state(self, group_id: str) -> str:
        group = self.groups.get(group_id)
        return cs.DEAD if group is None else group.state

    def validate_commit(self, group_id: str, member_id: str, member_epoch: int, version: int,
                        transactional: bool = False) -> tuple[int, str | None]:
        """OffsetCommit against a consumer group: (error code, message)."""
        group = self.groups.get(group_id)
        if group is None:
            return GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        if member_epoch < 0 and not group.members:
            return NONE, None                     # the admin client, or a simple consumer
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
        if not transactional and version < OFFSET_COMMIT_MODERN_VERSION:
            return UNSUPPORTED_VERSION, ("OffsetCommit version 9 or above must be used by "
                                         "members using the modern group protocol")
        return self._epoch_matches(member, member_epoch)

    def validate_fetch(self, group_id: str, member_id: str | None, member_epoch: int
                       ) -> tuple[int, str | None]:
        """OffsetFetch v9+ against a consumer group: (error code, message)."""
        if member_id is None and member_epoch < 0:
            return NONE, None
        group = self.groups.get(group_id)
        if group is None:
            return GROUP_ID_NOT_FOUND, f"Group {group_id} not found."
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}."
        return self._epoch_matches(member, member_epoch)

    @staticmethod
    def _epoch_matches(member: Member, member_epoch: int) -> tuple[int, str | None]:
        if member_epoch != member.member_epoch:
            return STALE_MEMBER_EPOCH, (f"The received member epoch {member_epoch} does not "
                                        f"match the expected member epoch "
                                        f"{member.member_epoch}.")
        return NONE, None

    def describe(self, group_ids: list[str]) -> list[dict]:
        """ConsumerGroupDescribe's DescribedGroup per id."""
        names = {tid: name for name, (tid, _) in (self.topics or {}).items()}
        out = []
        for gid in group_ids:
            group = self.groups.get(gid)
            if group is None:
                out.append({"error_code": GROUP_ID_NOT_FOUND,
                            "error_message": f"Group {gid} not found.", "group_id": gid,
                            "group_state": "", "group_epoch": 0, "assignment_epoch": 0,
                            "assignor_name": "", "members": [],
                            "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
                continue
            out.append({"error_code": NONE, "error_message": None, "group_id": gid,
                        "group_state": group.state, "group_epoch": group.group_epoch,
                        "assignment_epoch": group.assignment_epoch,
                        "assignor_name": self.assignor_for(group),
                        "members": [self._describe_member(group, m, names)
                                    for _, m in sorted(group.members.items())],
                        "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED})
        return out

    @staticmethod
    def _describe_member(group: Group, m: Member, names: Mapping[str, str]) -> dict:
        def topic_partitions(parts):
            return {"topic_partitions": [
                {"topic_id": t, "topic_name": names[t], "partitions": sorted(ps)}
                for t, ps in sorted(parts.items()) if t in names]}
        return {"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": m.rack_id,
                "member_epoch": m.member_epoch, "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": sorted(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex or None,
                "assignment": topic_partitions(m.assigned),
                "target_assignment": topic_partitions(group.target.get(m.member_id, {}))}

    def list_groups(self, states_filter: list[str], types_filter: list[str]) -> list[dict]:
        """ListGroups' ListedGroup per consumer group that passes the filters (case-blind)."""
        states = {s.strip().lower() for s in states_filter}
        types = {t.strip().lower() for t in types_filter}
        if types and GROUP_TYPE not in types:
            return []
        return [{"group_id": gid, "protocol_type": PROTOCOL_TYPE, "group_state": group.state,
                 "group_type": GROUP_TYPE}
                for gid, group in sorted(self.groups.items())
                if not states or group.state.lower() in states]

    @staticmethod
    def describe_classic(group_id: str, version: int | None = None) -> dict:
        """DescribeGroups (the classic API) asked about a consumer group: Kafka 4 answers
        GROUP_ID_NOT_FOUND from v6, and a Dead group before (our codec's newest is v5)."""
        if version is not None and version >= DESCRIBE_GROUPS_NOT_FOUND_VERSION:
            return {"error_code": GROUP_ID_NOT_FOUND,
                    "error_message": f"Group {group_id} is not a classic group.",
                    "group_id": group_id, "group_state": "", "protocol_type": "",
                    "protocol_data": "", "members": [],
                    "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        return {"error_code": NONE, "group_id": group_id,
                "group_state": cs.DEAD, "protocol_type": "", "protocol_data": "",
                "members": [], "authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def delete(self, group_id: str) -> Out:
        """DeleteGroups for a consumer group: only an empty one (the shard adds the offsets'
        tombstones). Out.body is {"group_id", "error_code"}."""
        assert not self._out
        group = self.groups.get(group_id)
        if group is None:
            return Out([], {"group_id": group_id, "error_code": GROUP_ID_NOT_FOUND})
        if group.state != cs.EMPTY:
            return Out([], {"group_id": group_id, "error_code": NON_EMPTY_GROUP})
        for rec in cs.group_tombstones(group):
            self._emit(rec)
        assert group_id not in self.groups
        return Out(self._take(), {"group_id": group_id, "error_code": NONE})
