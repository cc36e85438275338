"""Replica placement: where the replicas of new partitions go, and reassignment plans.

Pure functions, no I/O. The rule (DESIGN.md "Placement", Kafka's
``AdminUtils.assignReplicasToBrokers``):

- Brokers are taken in a fixed order (sorted ids; rack-aware: the rack-alternated list
  below). Partition p's first (preferred) replica is broker ``(p + start_index) % n``:
  broker i leads partition i % n, round after round.
- The j-th further replica of a partition goes ``1 + (shift + j) % (n - 1)`` places
  after its first replica, where ``shift`` starts at ``start_index`` and grows by one
  every time the partition id wraps round the n brokers. With start_index 0 that is
  DESIGN's "the j-th replica of the k-th partition assigned to broker i goes to broker
  (i + j + k) % n" (k = p // n, j = 1 for the second replica), taken modulo n - 1 so
  that a replica never lands back on the partition's first broker.
- Rack-aware (every broker has ``broker.rack``): the broker order alternates racks
  (rack a's first broker, rack b's first, ..., rack a's second, ...), the shift is
  multiplied by the number of racks, and a candidate is skipped while it would put a
  second replica in a rack (or on a broker) when some rack (broker) has none yet.
  Some brokers with a rack and some without is an error, as Kafka's default
  ``RackAwareMode.Enforced``.

Kafka picks ``start_index`` at random when it is not given; here the default is 0 (the
DESIGN rule, and deterministic). ``start_partition_id`` and ``start_index`` are used when
partitions are added to a topic (Kafka: ``start_index`` is the index of the broker that
holds partition 0's first replica).

Reassignment planners (used by the tools): ``plan_add_broker`` moves a balanced share of
replicas (and preferred leaderships) onto a new broker, ``plan_remove_broker`` moves every
replica off a broker; both move as few replicas as they can and keep each replica's
position in its list, so a moved preferred replica stays the preferred one.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping

from node.wire.control import REPLICAS_MAX


class PlacementError(Exception):
    """A placement request that cannot be satisfied. ``kafka_error`` names its code."""

    kafka_error = "INVALID_REPLICA_ASSIGNMENT"


class InvalidReplicationFactor(PlacementError):
    kafka_error = "INVALID_REPLICATION_FACTOR"


class InvalidPartitions(PlacementError):
    kafka_error = "INVALID_PARTITIONS"


class InvalidReplicaAssignment(PlacementError):
    kafka_error = "INVALID_REPLICA_ASSIGNMENT"


def assign_replicas(broker_ids: Iterable[int], racks: Mapping[int, str | None] | None,
                    num_partitions: int, replication_factor: int, start_index: int = 0,
                    start_partition_id: int = 0) -> dict[int, list[int]]:
    """partition id -> replica list (first = preferred leader) for ``num_partitions``
    partitions numbered from ``start_partition_id``."""
    brokers = sorted(set(broker_ids))
    if num_partitions <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > REPLICAS_MAX:
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than {REPLICAS_MAX}, the most "
            f"replicas a partition may have here.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}.")
    if start_index < 0:
        raise PlacementError(f"start_index must be >= 0, got {start_index}")
    rack_of = {b: (racks or {}).get(b) for b in brokers}
    with_rack = [b for b in brokers if rack_of[b] is not None]
    if not with_rack:
        return _assign_rack_unaware(brokers, num_partitions, replication_factor,
                                    start_index, start_partition_id)
    if len(with_rack) != len(brokers):
        raise PlacementError("Not all brokers have rack information for replica rack "
                             "aware assignment.")
    return _assign_rack_aware(rack_of, num_partitions, replication_factor, start_index,
                              start_partition_id)


def _replica_index(first_index: int, shift: int, j: int, n: int) -> int:
    """Where the (j+1)-th follower replica goes: never back on the first broker."""
    return (first_index + 1 + (shift + j) % (n - 1)) % n


def _assign_rack_unaware(brokers: list[int], num_partitions: int, replication_factor: int,
                         start_index: int, start_partition_id: int) -> dict[int, list[int]]:
    n = len(brokers)
    result: dict[int, list[int]] = {}
    shift = start_index
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        replicas = [brokers[first]]
        replicas += [brokers[_replica_index(first, shift, j, n)]
                     for j in range(replication_factor - 1)]
        assert len(set(replicas)) == len(replicas), replicas
        result[partition] = replicas
        partition += 1
    return result


def rack_alternated_brokers(rack_of: Mapping[int, str]) -> list[int]:
    """Brokers ordered rack by rack in turn (racks sorted, brokers sorted in a rack)."""
    by_rack: dict[str, list[int]] = {}
    for broker in sorted(rack_of):
        by_rack.setdefault(rack_of[broker], []).append(broker)
    racks = sorted(by_rack)
    result: list[int] = []
    depth = 0
    while len(result) < len(rack_of):
        for rack in racks:
            if depth < len(by_rack[rack]):
                result.append(by_rack[rack][depth])
        depth += 1
    return result


def _assign_rack_aware(rack_of: Mapping[int, str], num_partitions: int,
                       replication_factor: int, start_index: int,
                       start_partition_id: int) -> dict[int, list[int]]:
    order = rack_alternated_brokers(rack_of)
    n = len(order)
    rack_count = len(set(rack_of.values()))
    result: dict[int, list[int]] = {}
    shift = start_index
    partition = max(0, start_partition_id)
    for _ in range(num_partitions):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start_index) % n
        leader = order[first]
        replicas = [leader]
        racks_used = {rack_of[leader]}
        k = 0
        for _ in range(replication_factor - 1):
            # Bounded: each pass over n candidates finds a broker without a replica.
            for _attempt in range(2 * n * n + 1):
                broker = order[_replica_index(first, shift * rack_count, k, n)]
                k += 1
                rack = rack_of[broker]
                rack_ok = rack not in racks_used or len(racks_used) == rack_count
                broker_ok = broker not in replicas
                if rack_ok and broker_ok:
                    replicas.append(broker)
                    racks_used.add(rack)
                    break
            else:  # pragma: no cover - the bound above is never reached
                raise AssertionError("rack-aware placement found no broker")
        assert len(set(replicas)) == len(replicas), replicas
        result[partition] = replicas
        partition += 1
    return result


def start_index_for_new_partitions(broker_ids: Iterable[int],
                                   existing: Mapping[int, list[int]]) -> int:
    """Kafka's ``addPartitions``: continue from the broker holding partition 0's first
    replica (the index of the first broker id >= it)."""
    brokers = sorted(set(broker_ids))
    if not existing or 0 not in existing or not existing[0]:
        return 0
    head = existing[0][0]
    for index, broker in enumerate(brokers):
        if broker >= head:
            return index
    return 0


def validate_assignment(assignment: Mapping[int, list[int]], broker_ids: Iterable[int],
                        first_partition: int = 0) -> None:
    """A manual assignment: partitions numbered from ``first_partition`` with no gap, one
    replication factor, no duplicate replica, every broker known."""
    known = set(broker_ids)
    if not assignment:
        raise InvalidReplicaAssignment("empty replica assignment")
    expected = list(range(first_partition, first_partition + len(assignment)))
    if sorted(assignment) != expected:
        raise InvalidReplicaAssignment(
            f"partitions must be numbered {expected[0]}..{expected[-1]} without gaps, "
            f"got {sorted(assignment)}")
    sizes = {len(r) for r in assignment.values()}
    if len(sizes) != 1 or 0 in sizes:
        raise InvalidReplicaAssignment("every partition must have the same, non-zero "
                                       "number of replicas")
    if max(sizes) > REPLICAS_MAX:
        raise InvalidReplicationFactor(f"Replication factor: {max(sizes)} larger than "
                                       f"{REPLICAS_MAX}, the most replicas a partition may "
                                       f"have here.")
    for partition, replicas in sorted(assignment.items()):
        if len(set(replicas)) != len(replicas):
            raise InvalidReplicaAssignment(f"duplicate replica in partition {partition}: "
                                           f"{replicas}")
        unknown = sorted(set(replicas) - known)
        if unknown:
            raise InvalidReplicaAssignment(f"partition {partition} names unknown brokers "
                                           f"{unknown}")


# ------------------------------------------------------------------ reassignment plans

Assignment = Mapping[tuple[str, int], list[int]]


def _loads(assignment: Assignment, brokers: Iterable[int]) -> tuple[dict, dict]:
    replicas = {b: 0 for b in brokers}
    preferred = {b: 0 for b in brokers}
    for r in assignment.values():
        for i, b in enumerate(r):
            replicas[b] = replicas.get(b, 0) + 1
            if i == 0:
                preferred[b] = preferred.get(b, 0) + 1
    return replicas, preferred


def plan_add_broker(assignment: Assignment, brokers: Iterable[int], new_broker: int
                    ) -> dict[tuple[str, int], list[int]]:
    """Moves (partition -> new replica list, changed partitions only) that give
    ``new_broker`` its fair share: floor(replicas / brokers) replicas, of which
    floor(partitions / brokers) preferred, taken from the most loaded brokers."""
    old = sorted(set(brokers) - {new_broker})
    if not old:
        return {}
    current = {tp: list(r) for tp, r in sorted(assignment.items())}
    everyone = old + [new_broker]
    load, lead = _loads(current, everyone)
    if load[new_broker]:
        raise PlacementError(f"broker {new_broker} already holds replicas")
    replica_target = sum(len(r) for r in current.values()) // len(everyone)
    leader_target = len(current) // len(everyone)
    moves: dict[tuple[str, int], list[int]] = {}

    def move(tp, position):
        replicas = current[tp]
        donor = replicas[position]
        replicas[position] = new_broker
        load[donor] -= 1
        load[new_broker] += 1
        if position == 0:
            lead[donor] -= 1
            lead[new_broker] += 1
        moves[tp] = list(replicas)

    # Preferred leaderships first (they move replicas too), then plain followers.
    while lead[new_broker] < leader_target and load[new_broker] < replica_target:
        donor = max(old, key=lambda b: (lead[b], load[b], -b))
        tp = next((tp for tp, r in current.items()
                   if r[0] == donor and new_broker not in r), None)
        if tp is None or lead[donor] <= leader_target:
            break
        move(tp, 0)
    while load[new_broker] < replica_target:
        donor = max(old, key=lambda b: (load[b], -b))
        if load[donor] <= replica_target:
            break
        choice = next(((tp, r.index(donor)) for tp, r in current.items()
                       if donor in r[1:] and new_broker not in r), None)
        if choice is None:
            break
        move(*choice)
    return moves


def plan_remove_broker(assignment: Assignment, brokers: Iterable[int], removed: int
                       ) -> dict[tuple[str, int], list[int]]:
    """Moves that take every replica off ``removed``: each goes to the least loaded
    remaining broker not already holding that partition (lowest id on ties)."""
    remaining = sorted(set(brokers) - {removed})
    current = {tp: list(r) for tp, r in sorted(assignment.items())}
    load, lead = _loads(current, remaining)
    load.pop(removed, None)
    lead.pop(removed, None)
    moves: dict[tuple[str, int], list[int]] = {}
    for tp, replicas in current.items():
        if removed not in replicas:
            continue
        position = replicas.index(removed)
        candidates = [b for b in remaining if b not in replicas]
        if not candidates:
            raise InvalidReplicationFactor(
                f"{tp[0]}-{tp[1]} has {len(replicas)} replicas but only "
                f"{len(remaining)} brokers remain")
        if position == 0:
            target = min(candidates, key=lambda b: (lead[b], load[b], b))
            lead[target] += 1
        else:
            target = min(candidates, key=lambda b: (load[b], b))
        load[target] += 1
        replicas[position] = target
        moves[tp] = list(replicas)
    return moves
