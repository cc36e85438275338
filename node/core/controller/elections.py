"""The election rules: pure functions of (replicas, state, who may lead) giving the new
(leader, isr), or None when there is nothing to elect. Kafka's
PartitionLeaderElectionAlgorithms; the core calls them as ``elections.elect_*`` (so a
test may plant a broken rule here).

Rules (Kafka ZK mode, DESIGN.md "Replication"):
- Leader election after a failure (``elect_offline``): the first live replica in ISR
  order (DESIGN.md; Kafka walks the assignment order) becomes leader, ISR = the live ISR
  members. None: with ``unclean.leader.election.enable`` (broker config, overridden by
  ``/config/topics/T``) the first live replica in assignment order, ISR = {it};
  otherwise the partition goes offline (leader -1, ISR kept) and the controller logs
  NoReplicaOnlineException; it comes back when an ISR replica returns.
- Preferred election (``elect_preferred``): the first replica of the assignment, when
  alive and in the ISR.
- Controlled shutdown (``elect_controlled_shutdown``): the first replica (assignment
  order) that is alive, in the ISR and not shutting down.
- Reassignment completed (``elect_reassigned``): the leader stays if in the target, else
  the first live ISR replica of the target.
"""
from __future__ import annotations

from collections.abc import Iterable

from node.wire.zkdata import PartitionState


def elect_offline(replicas: Iterable[int], isr: Iterable[int], eligible: set[int],
                  unclean: bool, elr: Iterable[int] = ()) -> tuple[int, tuple[int, ...], bool] | None:
    """(leader, isr, was_unclean) for a partition without a live leader, or None: the
    live ISR members; else a live ELR member (KIP-966: it holds everything below the
    HW), alone in the ISR; else, with unclean election, any live replica."""
    live_isr = tuple(r for r in isr if r in eligible)
    if live_isr:
        return live_isr[0], live_isr, False
    elr = set(elr)
    live_elr = [r for r in replicas if r in elr and r in eligible]
    if live_elr:
        return live_elr[0], (live_elr[0],), False
    if unclean:
        live = [r for r in replicas if r in eligible]
        if live:
            return live[0], (live[0],), True
    return None


def elect_preferred(replicas: tuple[int, ...], state: PartitionState, eligible: set[int]
                    ) -> tuple[int, tuple[int, ...]] | None:
    preferred = replicas[0]
    if state.leader == preferred or preferred not in eligible or preferred not in state.isr:
        return None
    return preferred, state.isr


def elect_controlled_shutdown(replicas: tuple[int, ...], state: PartitionState,
                              eligible: set[int], shutting_down: set[int]
                              ) -> tuple[int, tuple[int, ...]] | None:
    leader = next((r for r in replicas if r in eligible and r in state.isr), None)
    if leader is None:
        return None
    return leader, tuple(r for r in state.isr if r not in shutting_down)


def elect_reassigned(target: tuple[int, ...], state: PartitionState, live: set[int],
                     eligible: set[int]) -> tuple[int, tuple[int, ...]] | None:
    """Completion of a reassignment: keep a live leader that stays, else the first
    eligible ISR member of the target."""
    isr = tuple(r for r in state.isr if r in target)
    if state.leader in target and state.leader in live and state.leader in isr:
        return state.leader, isr
    leader = next((r for r in target if r in eligible and r in isr), None)
    return None if leader is None else (leader, isr)
