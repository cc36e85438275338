"""The state of KIP-848 consumer groups, and the ``__consumer_offsets`` records that hold it.

Every change to a group is a record, and the state is exactly what replaying the records
gives (as in Kafka's GroupMetadataManager, where the coordinator replays the records it
writes): ``ConsumerGroups`` builds records with the functions below and applies each one at
once through ``apply`` (the same code a coordinator runs when it loads the partition), so a
coordinator that takes over continues at the same epochs.

Records (Kafka 4's, key version -> record; value version 0; ``Rec.value is None`` is a
tombstone):

- 3 ConsumerGroupMetadata: the group epoch. Its tombstone deletes the group.
- 4 ConsumerGroupPartitionMetadata: the subscribed topics' ids and partition counts.
- 5 ConsumerGroupMemberMetadata: a member's subscription, client, rebalance timeout.
- 6 ConsumerGroupTargetAssignmentMetadata: the assignment epoch.
- 7 ConsumerGroupTargetAssignmentMember: a member's target assignment.
- 8 ConsumerGroupCurrentMemberAssignment: a member's epochs, state, assigned partitions
  and partitions pending revocation.

A member leaves with the tombstones of 8, 7 and 5, in that order (the replay checks it).

Invariants (asserted in ``Group``): a partition has at most one owning member; its
*partition epoch* is the epoch of that member (a member owns what it is assigned and what
it still has to revoke). A partition without an epoch is free: only then may the
reconciliation give it to another member.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from node.core.groups.records import Rec

Parts = Mapping[str, frozenset[int]]        # topic id (text) -> partitions; no empty sets

# MemberState byte values (Kafka's modern.MemberState).
STABLE = 0
UNREVOKED_PARTITIONS = 1
UNRELEASED_PARTITIONS = 2
UNKNOWN_STATE = 127

LEAVE_GROUP_EPOCH = -1               # a member leaves (and a removed member's epoch)
LEAVE_STATIC_EPOCH = -2              # a static member leaves for a while, keeping its place

# Key versions of the ConsumerGroup* records.
GROUP_METADATA = 3
PARTITION_METADATA = 4
MEMBER_METADATA = 5
TARGET_METADATA = 6
TARGET_MEMBER = 7
CURRENT_ASSIGNMENT = 8
RECORD_KEY_VERSIONS = frozenset(range(GROUP_METADATA, CURRENT_ASSIGNMENT + 1))


def freeze(parts: Mapping[str, object]) -> dict[str, frozenset[int]]:
    """A topic -> partitions map with frozen sets, without empty entries."""
    return {t: frozenset(ps) for t, ps in sorted(parts.items()) if ps}


def parts_from_list(items: list[dict]) -> dict[str, frozenset[int]]:
    out: dict[str, set[int]] = {}
    for item in items:
        out.setdefault(item["topic_id"], set()).update(item["partitions"])
    return freeze(out)


def parts_to_list(parts: Parts) -> list[dict]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(parts.items())]


@dataclass(frozen=True)
class Member:
    """A member as its records say (ConsumerGroupMember)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str = ""
    server_assignor: str | None = None
    assigned: Parts = field(default_factory=dict)
    pending_revocation: Parts = field(default_factory=dict)

    def reconciled_to(self, target_epoch: int) -> bool:
        return self.state == STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int, **changes) -> "Member":
        """Moves to ``epoch``, remembering the epoch it leaves (Kafka's updateMemberEpoch)."""
        return replace(self, member_epoch=epoch, previous_member_epoch=self.member_epoch,
                       **changes)


# Group states (ConsumerGroup.ConsumerGroupState), as Kafka names them on the wire.
EMPTY, ASSIGNING, RECONCILING, STABLE_GROUP, DEAD = \
    "Empty", "Assigning", "Reconciling", "Stable", "Dead"


class Group:
    """One consumer group: the hard state (from records) and indexes derived from it."""

    def __init__(self, group_id: str):
        assert group_id, "a group has an id"
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.subscription_metadata: dict[str, tuple[str, int]] = {}   # name -> (id, count)
        self.members: dict[str, Member] = {}
        self.target: dict[str, dict[str, frozenset[int]]] = {}         # member -> parts
        self.owners: dict[tuple[str, int], tuple[str, int]] = {}   # (topic id, p) ->
                                                                  # (member, its epoch)
        self.static: dict[str, str] = {}                                # instance -> member

    # ---------------------------------------------------------------- derived views
    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ASSIGNING
        if all(m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return STABLE_GROUP
        return RECONCILING

    def partition_epoch(self, topic_id: str, partition: int) -> int:
        owner = self.owners.get((topic_id, partition))
        return -1 if owner is None else owner[1]

    def subscribed_names(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def static_member(self, instance_id: str | None) -> Member | None:
        member_id = self.static.get(instance_id) if instance_id is not None else None
        return self.members[member_id] if member_id is not None else None

    # ---------------------------------------------------------------- changes
    def put_member(self, new: Member) -> None:
        old = self.members.get(new.member_id)
        if old is not None:
            self._release(old)
        self.members[new.member_id] = new
        for parts in (new.assigned, new.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    mine = (new.member_id, new.member_epoch)
                    holder = self.owners.setdefault((t, p), mine)
                    assert holder == mine, \
                        f"{self.group_id}: {t}-{p} given to {mine} while owned by {holder}"
        if old is not None and old.instance_id is not None and old.instance_id != new.instance_id:
            self.static.pop(old.instance_id, None)
        if new.instance_id is not None:
            self.static[new.instance_id] = new.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id)
        self._release(old)
        if old.instance_id is not None and self.static.get(old.instance_id) == member_id:
            del self.static[old.instance_id]

    def _release(self, old: Member) -> None:
        for parts in (old.assigned, old.pending_revocation):
            for t, ps in parts.items():
                for p in ps:
                    holder = self.owners.pop((t, p), None)
                    assert holder == (old.member_id, old.member_epoch), \
                        f"{self.group_id}: {t}-{p} held by {holder}, not {old.member_id}"


# ------------------------------------------------------------------ record builders

def epoch_record(group_id: str, epoch: int | None) -> Rec:
    return Rec(GROUP_METADATA, {"group_id": group_id},
               None if epoch is None else {"epoch": epoch})


def partition_metadata_record(group_id: str, metadata: Mapping[str, tuple[str, int]] | None
                              ) -> Rec:
    value = None if metadata is None else {"topics": [
        {"topic_id": tid, "topic_name": name, "num_partitions": n, "partition_metadata": []}
        for name, (tid, n) in sorted(metadata.items())]}
    return Rec(PARTITION_METADATA, {"group_id": group_id}, value)


def member_metadata_record(group_id: str, member_id: str, m: Member | None) -> Rec:
    value = None if m is None else {
        "instance_id": m.instance_id, "rack_id": m.rack_id, "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": sorted(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex,
        "rebalance_timeout_ms": m.rebalance_timeout_ms, "server_assignor": m.server_assignor,
        "classic_member_metadata": None}
    return Rec(MEMBER_METADATA, {"group_id": group_id, "member_id": member_id}, value)


def target_epoch_record(group_id: str, epoch: int | None) -> Rec:
    return Rec(TARGET_METADATA, {"group_id": group_id},
               None if epoch is None else {"assignment_epoch": epoch})


def target_member_record(group_id: str, member_id: str, parts: Parts | None) -> Rec:
    value = None if parts is None else {"topic_partitions": parts_to_list(parts)}
    return Rec(TARGET_MEMBER, {"group_id": group_id, "member_id": member_id}, value)


def current_assignment_record(group_id: str, member_id: str, m: Member | None) -> Rec:
    value = None if m is None else {
        "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
        "state": m.state, "assigned_partitions": parts_to_list(m.assigned),
        "partitions_pending_revocation": parts_to_list(m.pending_revocation)}
    return Rec(CURRENT_ASSIGNMENT, {"group_id": group_id, "member_id": member_id}, value)


def member_tombstones(group_id: str, member_id: str) -> list[Rec]:
    """A member's removal, in the order the replay requires."""
    return [current_assignment_record(group_id, member_id, None),
            target_member_record(group_id, member_id, None),
            member_metadata_record(group_id, member_id, None)]


def group_tombstones(group: Group) -> list[Rec]:
    """Deleting a group (Kafka's createGroupTombstoneRecords order)."""
    gid, ids = group.group_id, sorted(group.members)
    return ([current_assignment_record(gid, m, None) for m in ids]
            + [target_member_record(gid, m, None) for m in ids]
            + [target_epoch_record(gid, None)]
            + [member_metadata_record(gid, m, None) for m in ids]
            + [partition_metadata_record(gid, None), epoch_record(gid, None)])


# ------------------------------------------------------------------ replay

class ReplayError(ValueError):
    """Records that Kafka's coordinator would also refuse to load (out of order)."""


def apply(groups: dict[str, Group], rec: Rec) -> None:
    """Applies one record to ``groups`` (loading, and every change made live)."""
    assert rec.key_version in RECORD_KEY_VERSIONS, rec.key_version
    gid = rec.key["group_id"]
    group = groups.get(gid)
    if group is None:
        if rec.value is None:
            return                                  # a tombstone of a group already gone
        group = groups[gid] = Group(gid)
    v = rec.value
    kv = rec.key_version
    if kv == GROUP_METADATA:
        if v is not None:
            group.group_epoch = v["epoch"]
            return
        if group.members or group.target or group.assignment_epoch != -1:
            raise ReplayError(f"group {gid} deleted before its members and target")
        del groups[gid]
    elif kv == PARTITION_METADATA:
        group.subscription_metadata = {} if v is None else {
            t["topic_name"]: (t["topic_id"], t["num_partitions"]) for t in v["topics"]}
    elif kv == MEMBER_METADATA:
        _apply_member_metadata(group, rec.key["member_id"], v)
    elif kv == TARGET_METADATA:
        if v is None and group.target:
            raise ReplayError(f"group {gid}: target epoch deleted before the targets")
        group.assignment_epoch = -1 if v is None else v["assignment_epoch"]
    elif kv == TARGET_MEMBER:
        if v is None:
            group.target.pop(rec.key["member_id"], None)
        else:
            group.target[rec.key["member_id"]] = parts_from_list(v["topic_partitions"])
    else:
        assert kv == CURRENT_ASSIGNMENT, kv
        _apply_current(group, rec.key["member_id"], v)


def _apply_member_metadata(group: Group, member_id: str, v: dict | None) -> None:
    old = group.members.get(member_id)
    if v is None:
        if old is None:
            return
        if old.member_epoch != LEAVE_GROUP_EPOCH or member_id in group.target:
            raise ReplayError(f"group {group.group_id}: member {member_id} deleted before its "
                              "current and target assignments")
        group.remove_member(member_id)
        return
    base = old if old is not None else Member(member_id)
    group.put_member(replace(
        base, instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
        client_host=v["client_host"],
        subscribed_topic_names=frozenset(v["subscribed_topic_names"]),
        subscribed_topic_regex=v["subscribed_topic_regex"] or "",
        rebalance_timeout_ms=v["rebalance_timeout_ms"], server_assignor=v["server_assignor"]))


def _apply_current(group: Group, member_id: str, v: dict | None) -> None:
    old = group.members.get(member_id)
    if v is None:
        if old is not None:
            group.put_member(replace(old, member_epoch=LEAVE_GROUP_EPOCH,
                                     previous_member_epoch=LEAVE_GROUP_EPOCH,
                                     assigned={}, pending_revocation={}))
        return
    state = v["state"] if v["state"] in (STABLE, UNREVOKED_PARTITIONS,
                                         UNRELEASED_PARTITIONS) else UNKNOWN_STATE
    base = old if old is not None else Member(member_id)
    group.put_member(replace(
        base, member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"],
        state=state, assigned=parts_from_list(v["assigned_partitions"]),
        pending_revocation=parts_from_list(v["partitions_pending_revocation"])))
