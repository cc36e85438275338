"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) as a pure core.

Theory of operation. A group is in one of five states (Kafka's ClassicGroupState):

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join, leave, expiry, leader rejoin--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;  any --DeleteGroups/expiry--> Dead (removed)

A rebalance parks every member's JoinGroup until all known members have rejoined or the
rebalance timeout (the largest of the members') passes; members that did not rejoin are
removed (static ones stay), the generation is bumped, a protocol all members support is
chosen by vote, and each parked JoinGroup is answered (the leader gets every member's
metadata). SyncGroups are parked until the leader's SyncGroup brings the assignment: then a
GroupMetadataValue record (members, subscriptions, assignment) is written and every parked
SyncGroup answered. The first rebalance of an Empty group waits
``group.initial.rebalance.delay.ms``, again while new members keep arriving, up to the
rebalance timeout. KIP-394: from JoinGroup v4 a member without an id gets MEMBER_ID_REQUIRED
and a new id to rejoin with. KIP-345: a static member (group.instance.id) that rejoins with
a new member id replaces its old one; in Stable, if the selected protocol stays the same,
without a rebalance (a record is written, the old id is fenced with FENCED_INSTANCE_ID).

Timers are deadlines on the groups and members; ``tick(now_ms)`` runs those that are due.
Replies go into the caller's ``Effects``; a parked request carries its shell token.
"""

from collections.abc import Callable

from node.kafka.protocol import messages as m

from . import effects as E
from . import records
from .classic_group import (_VALID_PREVIOUS, CONSUMER_PROTOCOL_TYPE, S, Group, Member, Parked,
                            State, describe, listed)
from .config import GroupConfig
from .effects import Effects
from .records import Rec

NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000   # Kafka's classicGroupNewMemberJoinTimeoutMs
SKIP_ASSIGNMENT_FROM_VERSION = 9        # JoinGroup v9: the static leader may skip assignment
MEMBER_ID_REQUIRED_FROM_VERSION = 4     # KIP-394
TICK_PASSES_MAX = 16                    # timers that re-arm at once (a 0 ms initial delay)

__all__ = ["ClassicGroups", "Group", "Member", "State", "describe", "listed",
           "CONSUMER_PROTOCOL_TYPE"]


def _join_body(**fields) -> dict:
    body = records.defaults_of(m.JoinGroupResponse)
    body.update(fields)
    return body


def _sync_body(**fields) -> dict:
    body = records.defaults_of(m.SyncGroupResponse)
    body.update(fields)
    return body


class ClassicGroups:
    """Every classic group of one shard."""

    def __init__(self, config: GroupConfig, new_id: Callable[[], str]):
        self.config = config
        self.new_id = new_id
        self.groups: dict[str, Group] = {}

    def get(self, group_id: str) -> Group | None:
        return self.groups.get(group_id)

    def create(self, group_id: str) -> Group:
        assert group_id not in self.groups
        group = self.groups[group_id] = Group(group_id)
        return group

    # ---- JoinGroup ---------------------------------------------------------------------

    def join(self, now: int, version: int, body: dict, token, client_id: str,
             client_host: str, fx: Effects) -> None:
        gid, member_id = body["group_id"], body.get("member_id") or ""
        instance_id = body.get("group_instance_id")
        session_ms = body["session_timeout_ms"]
        rebalance_ms = body.get("rebalance_timeout_ms", -1)
        if rebalance_ms is None or rebalance_ms < 0:
            rebalance_ms = session_ms                  # JoinGroup v0: no rebalance timeout
        names = [p["name"] for p in body.get("protocols", [])]
        protocols = [(p["name"], bytes(p["metadata"])) for p in body.get("protocols", [])]

        def fail(error: int, mid: str = member_id) -> None:
            fx.reply(token, _join_body(error_code=error, member_id=mid))

        if not gid:
            return fail(E.INVALID_GROUP_ID)
        if not (self.config.group_min_session_timeout_ms <= session_ms
                <= self.config.group_max_session_timeout_ms):
            return fail(E.INVALID_SESSION_TIMEOUT)
        group = self.groups.get(gid)
        is_new_group = group is None
        if group is None:
            if member_id:
                return fail(E.UNKNOWN_MEMBER_ID)
            group = self.create(gid)
        records_before = len(fx.records)
        if not self._accept_joining(group, member_id):
            group.remove(member_id)
            fail(E.GROUP_MAX_SIZE_REACHED, "")
        elif group.state is S.DEAD:
            fail(E.COORDINATOR_NOT_AVAILABLE, "" if not member_id else member_id)
        elif not group.supports(body.get("protocol_type", ""), names):
            fail(E.INCONSISTENT_GROUP_PROTOCOL, "" if not member_id else member_id)
        elif not member_id:
            new_id = f"{instance_id or client_id}-{self.new_id()}"
            if instance_id is not None:
                old = group.static.get(instance_id)
                if old is not None:
                    self._replace_static(now, version, group, old, new_id, session_ms,
                                         rebalance_ms, protocols, token, fx)
                else:
                    self._add_member(now, version, group, new_id, instance_id, client_id,
                                     client_host, rebalance_ms, session_ms, body, protocols,
                                     token, fx)
            elif version >= MEMBER_ID_REQUIRED_FROM_VERSION:
                group.pending_join[new_id] = now + session_ms
                fail(E.MEMBER_ID_REQUIRED, new_id)
            else:
                self._add_member(now, version, group, new_id, None, client_id, client_host,
                                 rebalance_ms, session_ms, body, protocols, token, fx)
        elif member_id in group.pending_join:
            if instance_id is not None:
                fail(E.INVALID_REQUEST)     # a pending member is always dynamic
            else:
                self._add_member(now, version, group, member_id, None, client_id, client_host,
                                 rebalance_ms, session_ms, body, protocols, token, fx)
        else:
            error = group.validate_member(member_id, instance_id)
            if error:
                return fail(error)
            self._join_existing(now, version, group, group.members[member_id], session_ms,
                                rebalance_ms, protocols, token, fx)
        if is_new_group and len(fx.records) == records_before and gid in self.groups:
            # Kafka's newEmptyGroupMetadataRecord: the group exists from now on.
            stamp = group.state_timestamp_ms
            fx.records.append(records.group_metadata(gid, {
                "protocol_type": "", "generation": 0, "protocol": None, "leader": None,
                "current_state_timestamp": -1 if stamp is None else stamp, "members": []}))

    def _accept_joining(self, group: Group, member_id: str) -> bool:
        limit = self.config.group_max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            return (member is not None and member.join is not None) or group.awaiting_join() < limit
        return member_id in group.members or len(group.members) < limit

    def _join_existing(self, now, version, group: Group, member: Member, session_ms,
                       rebalance_ms, protocols, token, fx) -> None:
        state = group.state
        same = member.protocols == protocols
        if state is S.PREPARING_REBALANCE:
            return self._update_then_rebalance(now, version, group, member, session_ms,
                                               rebalance_ms, protocols, token, fx)
        if state is S.COMPLETING_REBALANCE and same:
            return fx.reply(token, self._join_answer(group, member.member_id,
                                                     group.leader == member.member_id))
        if state is S.STABLE and same and group.leader != member.member_id:
            return fx.reply(token, self._join_answer(group, member.member_id, False))
        if state in (S.COMPLETING_REBALANCE, S.STABLE):
            return self._update_then_rebalance(now, version, group, member, session_ms,
                                               rebalance_ms, protocols, token, fx)
        fx.reply(token, _join_body(error_code=E.UNKNOWN_MEMBER_ID, member_id=member.member_id))

    def _join_answer(self, group: Group, member_id: str, with_members: bool,
                     leader: str | None = None, skip: bool = False) -> dict:
        members = []
        if with_members:
            members = [{"member_id": mb.member_id, "group_instance_id": mb.instance_id,
                        "metadata": mb.metadata(group.protocol_name)}
                       for mb in group.members.values()]
        return _join_body(generation_id=group.generation, protocol_type=group.protocol_type,
                          protocol_name=group.protocol_name,
                          leader=group.leader if leader is None else leader,
                          skip_assignment=skip, member_id=member_id, members=members)

    def _add_member(self, now, version, group: Group, member_id, instance_id, client_id,
                    client_host, rebalance_ms, session_ms, body, protocols, token, fx) -> None:
        member = Member(member_id, instance_id, client_id, client_host, rebalance_ms,
                        session_ms, body.get("protocol_type", ""), protocols,
                        join=Parked(token, version), is_new=True,
                        deadline_ms=now + NEW_MEMBER_JOIN_TIMEOUT_MS)
        if group.state is S.PREPARING_REBALANCE and group.previous_state is S.EMPTY:
            group.new_member_added = True
        group.add(member)
        self._rebalance_or_complete(now, group, fx)

    def _update_then_rebalance(self, now, version, group, member, session_ms, rebalance_ms,
                               protocols, token, fx) -> None:
        member.protocols, member.session_timeout_ms = protocols, session_ms
        member.rebalance_timeout_ms = rebalance_ms
        if member.join is not None and member.join.token is not token:
            # A second JoinGroup while one is parked (a client's retry): the older one is
            # superseded; every token is answered once.
            fx.reply(member.join.token, _join_body(error_code=E.REBALANCE_IN_PROGRESS,
                                                   member_id=member.member_id))
        member.join = Parked(token, version)
        self._rebalance_or_complete(now, group, fx)

    def _replace_static(self, now, version, group: Group, old_id, new_id, session_ms,
                        rebalance_ms, protocols, token, fx) -> None:
        old = group.members.pop(old_id)
        if old.join is not None:
            fx.reply(old.join.token, _join_body(error_code=E.FENCED_INSTANCE_ID, member_id=old_id,
                                                protocol_name=None))
        if old.sync is not None:
            fx.reply(old.sync.token, _sync_body(error_code=E.FENCED_INSTANCE_ID))
        old_leader = group.leader
        member = Member(new_id, old.instance_id, old.client_id, old.client_host,
                        rebalance_ms, session_ms, old.protocol_type, protocols,
                        assignment=old.assignment, join=Parked(token, version),
                        deadline_ms=now + session_ms)
        group.members[new_id] = member
        group.static[old.instance_id] = new_id
        if group.pending_join.pop(old_id, None) is not None:
            group.pending_join[new_id] = now + session_ms
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        if group.leader == old_id:
            group.leader = new_id
        if group.state is S.STABLE:
            if group.protocol_name == group.select_protocol():
                fx.records.append(records.group_metadata(group.group_id,
                                                         group.metadata_value(now)))
                member.join = None
                is_leader = group.leader == new_id
                if version >= SKIP_ASSIGNMENT_FROM_VERSION:
                    answer = self._join_answer(group, new_id, is_leader, skip=is_leader)
                else:
                    answer = self._join_answer(group, new_id, False, leader=old_leader)
                return fx.reply(token, answer)
            return self._rebalance_or_complete(now, group, fx)
        if group.state is S.COMPLETING_REBALANCE:
            return self._prepare_rebalance(now, group, fx)
        assert group.state is S.PREPARING_REBALANCE, group.state
        self._maybe_complete_join(now, group, fx)

    # ---- rebalance ---------------------------------------------------------------------

    def _rebalance_or_complete(self, now, group: Group, fx) -> None:
        if group.state in _VALID_PREVIOUS[S.PREPARING_REBALANCE]:
            self._prepare_rebalance(now, group, fx)
        else:
            self._maybe_complete_join(now, group, fx)

    def _maybe_complete_join(self, now, group: Group, fx) -> None:
        if (group.state is S.PREPARING_REBALANCE and group.previous_state is not S.EMPTY
                and group.all_joined()):
            self._complete_join(now, group, fx)

    def _prepare_rebalance(self, now, group: Group, fx) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            for mb in group.members.values():
                mb.assignment = b""
            self._propagate(now, group, E.REBALANCE_IN_PROGRESS, fx)
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        initial = group.state is S.EMPTY
        group.transition(S.PREPARING_REBALANCE, now)
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            group.initial_delay = (delay, max(group.rebalance_timeout_ms - delay, 0))
            group.join_deadline_ms = now + delay
        elif group.all_joined():
            self._complete_join(now, group, fx)
        else:
            group.initial_delay = None
            group.join_deadline_ms = now + group.rebalance_timeout_ms

    def _join_timer(self, now, group: Group, fx) -> None:
        group.join_deadline_ms = None
        if group.initial_delay is not None:
            delay, remaining = group.initial_delay
            if group.new_member_added and remaining != 0:
                group.new_member_added = False
                new_delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
                group.initial_delay = (new_delay, max(remaining - delay, 0))
                group.join_deadline_ms = now + new_delay
                return
        self._complete_join(now, group, fx)

    def _complete_join(self, now, group: Group, fx) -> None:
        group.join_deadline_ms, group.initial_delay = None, None
        for mb in [mb for mb in group.members.values()
                   if mb.join is None and mb.instance_id is None]:
            group.remove(mb.member_id)                 # dynamic members that did not rejoin
        if group.state is S.DEAD:
            return
        if group.members and not self._elect_joined_leader(group):
            group.join_deadline_ms = now + group.rebalance_timeout_ms
            return
        group.generation += 1
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition(S.EMPTY, now)
            fx.records.append(records.group_metadata(group.group_id, group.metadata_value(now)))
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        group.transition(S.COMPLETING_REBALANCE, now)
        for mb in group.members.values():
            if mb.join is not None:
                fx.reply(mb.join.token, self._join_answer(group, mb.member_id,
                                                          group.leader == mb.member_id))
                mb.join = None
            mb.deadline_ms = now + mb.session_timeout_ms
            mb.is_new = False
            group.pending_sync.add(mb.member_id)
        group.sync_deadline_ms = now + group.rebalance_timeout_ms

    @staticmethod
    def _elect_joined_leader(group: Group) -> bool:
        if group.leader is None:
            return False
        if group.members[group.leader].join is not None:
            return True
        for mb in group.members.values():
            if mb.join is not None:
                group.leader = mb.member_id
                return True
        return False

    def _propagate(self, now, group: Group, error: int, fx) -> None:
        for mb in group.members.values():
            if mb.sync is not None:
                if error:
                    body = _sync_body(error_code=error, assignment=mb.assignment)
                else:
                    body = _sync_body(protocol_type=group.protocol_type,
                                      protocol_name=group.protocol_name,
                                      assignment=mb.assignment)
                fx.reply(mb.sync.token, body)
                mb.sync = None
                mb.deadline_ms = now + mb.session_timeout_ms

    # ---- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    def sync(self, now: int, version: int, body: dict, token, fx: Effects) -> None:
        group = self.groups.get(body["group_id"])
        member_id = body.get("member_id", "")
        if group is None:
            return fx.reply(token, _sync_body(error_code=E.UNKNOWN_MEMBER_ID))
        error = (E.COORDINATOR_NOT_AVAILABLE if group.state is S.DEAD else
                 group.validate_member(member_id, body.get("group_instance_id")))
        if not error and body["generation_id"] != group.generation:
            error = E.ILLEGAL_GENERATION
        if not error and (_inconsistent(body.get("protocol_type"), group.protocol_type) or
                          _inconsistent(body.get("protocol_name"), group.protocol_name)):
            error = E.INCONSISTENT_GROUP_PROTOCOL
        if not error and group.state is S.PREPARING_REBALANCE:
            error = E.REBALANCE_IN_PROGRESS
        if error:
            return fx.reply(token, _sync_body(error_code=error))
        member = group.members[member_id]
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            group.sync_deadline_ms = None
        if group.state is S.STABLE:
            return fx.reply(token, _sync_body(protocol_type=group.protocol_type,
                                              protocol_name=group.protocol_name,
                                              assignment=member.assignment))
        assert group.state is S.COMPLETING_REBALANCE, group.state
        if member.sync is not None:
            fx.reply(member.sync.token, _sync_body(error_code=E.REBALANCE_IN_PROGRESS))
        member.sync = Parked(token, version)
        if group.leader != member_id:
            return
        given = {a["member_id"]: bytes(a["assignment"]) for a in body.get("assignments", [])}
        for mb in group.members.values():
            mb.assignment = given.get(mb.member_id, b"")
        fx.records.append(records.group_metadata(group.group_id, group.metadata_value(now)))
        self._propagate(now, group, E.NONE, fx)
        group.transition(S.STABLE, now)

    def heartbeat(self, now: int, body: dict) -> int:
        group = self.groups.get(body["group_id"])
        member_id = body.get("member_id", "")
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(member_id, body.get("group_instance_id"))
        if error:
            return error
        if body["generation_id"] != group.generation:
            return E.ILLEGAL_GENERATION
        if group.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        member = group.members[member_id]
        member.deadline_ms = now + member.session_timeout_ms
        return E.REBALANCE_IN_PROGRESS if group.state is S.PREPARING_REBALANCE else E.NONE

    def touch(self, now: int, group_id: str, member_id: str) -> None:
        """An accepted OffsetCommit keeps the session (Stable or PreparingRebalance)."""
        group = self.groups.get(group_id)
        if group is not None and group.state in (S.STABLE, S.PREPARING_REBALANCE):
            member = group.members.get(member_id)
            if member is not None:
                member.deadline_ms = now + member.session_timeout_ms

    def leave(self, now: int, body: dict, fx: Effects) -> dict:
        """LeaveGroup (v3+ batched; a top-level member id is v0-v2's one member)."""
        response = records.defaults_of(m.LeaveGroupResponse)
        identities = list(body.get("members") or [])
        legacy = not identities and bool(body.get("member_id"))
        if legacy:
            identities = [{"member_id": body["member_id"], "group_instance_id": None}]
        group = self.groups.get(body["group_id"])
        if group is None or group.state is S.DEAD:
            response["error_code"] = (E.UNKNOWN_MEMBER_ID if group is None
                                      else E.COORDINATOR_NOT_AVAILABLE)
            return response
        left = 0
        for ident in identities:
            mid, iid = ident.get("member_id", ""), ident.get("group_instance_id")
            error = E.NONE
            if not mid:
                if iid is not None and iid in group.static:
                    self._remove_member(group, group.static[iid], fx)
                else:
                    error = E.UNKNOWN_MEMBER_ID
            elif mid in group.pending_join:
                group.remove(mid)
            else:
                error = group.validate_member(mid, iid)
                if not error:
                    self._remove_member(group, mid, fx)
            left += error == E.NONE
            response["members"].append({"member_id": mid, "group_instance_id": iid,
                                        "error_code": error})
        if left:
            if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
                self._rebalance_or_complete(now, group, fx)
            elif group.state is S.PREPARING_REBALANCE:
                self._maybe_complete_join(now, group, fx)
        if legacy:
            response["error_code"] = response["members"][0]["error_code"]
        return response

    def _remove_member(self, group: Group, member_id: str, fx: Effects) -> None:
        member = group.members[member_id]
        if member.join is not None:
            fx.reply(member.join.token, _join_body(error_code=E.UNKNOWN_MEMBER_ID, member_id=""))
            member.join = None
        if member.sync is not None:
            fx.reply(member.sync.token, _sync_body(error_code=E.UNKNOWN_MEMBER_ID))
            member.sync = None
        group.remove(member_id)

    # ---- timers ----------------------------------------------------------------------------

    def tick(self, now: int, fx: Effects) -> None:
        """Every timer due at ``now``, including those a timer sets due at once."""
        for _ in range(TICK_PASSES_MAX):
            due = self.next_deadline_ms()
            if due is None or due > now:
                return
            self._tick_once(now, fx)
        raise AssertionError(f"timers still due after {TICK_PASSES_MAX} passes")

    def _tick_once(self, now: int, fx: Effects) -> None:
        for group in list(self.groups.values()):
            for mid, deadline in list(group.pending_join.items()):
                if deadline <= now:
                    group.remove(mid)
                    if group.state is S.PREPARING_REBALANCE and group.all_joined():
                        self._complete_join(now, group, fx)
            for member in list(group.members.values()):
                if member.deadline_ms is None or member.deadline_ms > now:
                    continue
                if group.members.get(member.member_id) is not member:
                    continue
                member.deadline_ms = None
                awaiting = member.join is not None or member.sync is not None
                if member.is_new or not awaiting:
                    self._expire_member(now, group, member, fx)
            if group.join_deadline_ms is not None and group.join_deadline_ms <= now:
                self._join_timer(now, group, fx)
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now:
                group.sync_deadline_ms = None
                if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
                    for mid in list(group.pending_sync):
                        group.remove(mid)
                    self._prepare_rebalance(now, group, fx)

    def _expire_member(self, now, group: Group, member: Member, fx) -> None:
        self._remove_member(group, member.member_id, fx)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._rebalance_or_complete(now, group, fx)
        elif group.state is S.PREPARING_REBALANCE and group.all_joined():
            self._complete_join(now, group, fx)

    def next_deadline_ms(self) -> int | None:
        times = []
        for group in self.groups.values():
            times += group.pending_join.values()
            times += [mb.deadline_ms for mb in group.members.values() if mb.deadline_ms is not None]
            times += [t for t in (group.join_deadline_ms, group.sync_deadline_ms) if t is not None]
        return min(times, default=None)

    # ---- loading ---------------------------------------------------------------------------

    def replay(self, rec: Rec) -> None:
        gid = rec.key["group"]
        if rec.value is None:
            self.groups.pop(gid, None)
            return
        v = rec.value
        group = Group(gid, generation=v["generation"], protocol_type=v["protocol_type"] or None,
                      protocol_name=v["protocol"], leader=v["leader"],
                      state_timestamp_ms=(None if v.get("current_state_timestamp", -1) == -1
                                          else v["current_state_timestamp"]))
        for mv in v["members"]:
            member = Member(mv["member_id"], mv.get("group_instance_id"), mv["client_id"],
                            mv["client_host"], mv.get("rebalance_timeout", -1),
                            mv["session_timeout"], group.protocol_type or "",
                            [(group.protocol_name, bytes(mv["subscription"]))],
                            assignment=bytes(mv["assignment"]))
            group.members[member.member_id] = member
            if member.instance_id is not None:
                group.static[member.instance_id] = member.member_id
        group.state = S.STABLE if group.members else S.EMPTY
        if group.members and group.leader not in group.members:
            group.leader = next(iter(group.members))
        group.subscribed_topics = group.compute_subscribed_topics()
        self.groups[gid] = group

    def loaded(self, now: int, fx: Effects) -> None:
        for group in self.groups.values():
            for member in group.members.values():
                member.deadline_ms = now + member.session_timeout_ms
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(now, group, fx)

    def unload(self) -> list[tuple[object, str]]:
        """Every parked request's token and kind ("join"/"sync")."""
        out = []
        for group in self.groups.values():
            for member in group.members.values():
                out += [(p.token, kind) for p, kind in ((member.join, "join"),
                                                        (member.sync, "sync")) if p]
        return out


def _inconsistent(given: str | None, current: str | None) -> bool:
    return given is not None and given != current
