"""A member's next assignment on its way to the target (Kafka's CurrentAssignmentBuilder).

KIP-848's incremental reconciliation, for one member at each of its heartbeats:

- A member keeps what it has of its target. What it has outside the target it must
  *revoke* first: it stays at its epoch in UNREVOKED_PARTITIONS, and the heartbeat answer
  leaves those partitions out, until a heartbeat reports that it no longer owns any of
  them (only then do they become free for others).
- Then it moves to the target epoch and is given the target partitions that are *free*
  (no other member owns them; the group's partition epochs say). Those still owned by
  others wait (UNRELEASED_PARTITIONS), and come at a later heartbeat, once released.
- So a partition is never given to a member while another one may still hold it: no two
  members own one partition at one epoch.

``owned`` is what the member's heartbeat reports (topic id -> partitions), or None when the
heartbeat left it out ("unchanged"): then the member is taken to own what it did.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping

from node.core.groups.consumer_state import (
    STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS, Member, Parts, freeze)


class FencedEpoch(Exception):
    """The member must abandon its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def owns_any(owned: Parts | None, partitions: Parts) -> bool:
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def next_member(member: Member, target_epoch: int, target: Parts,
                partition_epoch: Callable[[str, int], int], owned: Parts | None) -> Member:
    """The member after one reconciliation step towards ``target`` at ``target_epoch``."""
    if member.state == STABLE:
        if member.member_epoch == target_epoch:
            return member
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    if member.state == UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            return member                                  # still revoking: wait
        return _next(member, member.member_epoch + 1, target_epoch, target, partition_epoch,
                     owned)
    if member.state == UNRELEASED_PARTITIONS:
        return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
    # A state this coordinator does not know (written by a newer one): start afresh.
    if owned is None or any(owned.values()):
        raise FencedEpoch("The consumer group member is in an unknown state. "
                          "The member must abandon all its partitions and rejoin.")
    return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)


def _next(member: Member, epoch_if_revoking: int, target_epoch: int, target: Parts,
          partition_epoch: Callable[[str, int], int], owned: Parts | None) -> Member:
    keep: dict[str, set[int]] = {}
    revoke: dict[str, set[int]] = {}
    add: dict[str, set[int]] = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset())
        have = member.assigned.get(t, frozenset())
        keep[t] = set(have & want)
        revoke[t] = set(have - want)
        free = {p for p in want - have if partition_epoch(t, p) == -1}
        unreleased = unreleased or len(free) < len(want - have)
        add[t] = free
    keep_f, revoke_f, add_f = freeze(keep), freeze(revoke), freeze(add)

    if revoke_f and owns_any(owned, revoke_f):
        # Revoke first; stay at the current epoch until the member says it is done.
        return member.with_epoch(epoch_if_revoking, state=UNREVOKED_PARTITIONS,
                                 assigned=keep_f, pending_revocation=revoke_f)
    assigned = freeze({t: keep.get(t, set()) | add.get(t, set()) for t in set(keep) | set(add)})
    state = UNRELEASED_PARTITIONS if unreleased else STABLE
    return member.with_epoch(target_epoch, state=state, assigned=assigned,
                             pending_revocation={})


def parts_of(items: list[dict] | None) -> dict[str, frozenset[int]] | None:
    """The owned partitions of a heartbeat body (None stays None: "unchanged")."""
    if items is None:
        return None
    out: dict[str, set[int]] = {}
    for item in items:
        out.setdefault(item["topic_id"], set()).update(item["partitions"])
    return freeze(out)


def is_subset(owned: Parts | None, assigned: Mapping[str, frozenset[int]]) -> bool:
    """True when the member owns only partitions it is assigned (a lost answer's retry)."""
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items())
