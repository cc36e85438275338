"""Replica placement: DESIGN.md's rule (Kafka's AdminUtils.assignReplicasToBrokers) and
the reassignment planners."""
from __future__ import annotations

import itertools
from collections import Counter

import pytest

from node.core.placement import (InvalidPartitions, InvalidReplicaAssignment,
                            InvalidReplicationFactor, PlacementError, assign_replicas,
                            plan_add_broker, plan_remove_broker, rack_alternated_brokers,
                            start_index_for_new_partitions, validate_assignment)


def test_five_brokers_ten_partitions_match_kafkas_worked_example():
    # The table in Kafka's AdminUtils comment: p0..p4 lead on brokers 0..4, p5..p9 again;
    # second round's followers shift by one more.
    assert assign_replicas(range(5), None, 10, 3) == {
        0: [0, 1, 2], 1: [1, 2, 3], 2: [2, 3, 4], 3: [3, 4, 0], 4: [4, 0, 1],
        5: [0, 2, 3], 6: [1, 3, 4], 7: [2, 4, 0], 8: [3, 0, 1], 9: [4, 1, 2]}


@pytest.mark.parametrize("n", [2, 3, 4, 5, 7])
def test_design_rule_broker_i_leads_partition_i_mod_n_and_j_th_replica_goes_to_i_plus_j_plus_k(n):
    partitions = 3 * n
    rf = min(3, n)
    got = assign_replicas(range(n), None, partitions, rf)
    for p, replicas in got.items():
        i, k = p % n, p // n
        assert replicas[0] == i
        for j in range(1, rf):
            # DESIGN's (i + j + k) % n, wrapped so a replica never lands back on i.
            assert replicas[j] == (i + 1 + (j - 1 + k) % (n - 1)) % n
            if j + k < n:
                assert replicas[j] == (i + j + k) % n


def test_broker_ids_are_taken_in_sorted_order_whatever_their_values():
    assert assign_replicas([12, 10, 11], None, 3, 2) == {0: [10, 11], 1: [11, 12], 2: [12, 10]}


def test_start_index_and_start_partition_id_continue_a_topic():
    existing = assign_replicas(range(3), None, 3, 2, start_index=1)
    assert existing[0][0] == 1
    start = start_index_for_new_partitions(range(3), existing)
    assert start == 1
    more = assign_replicas(range(3), None, 2, 2, start_index=start, start_partition_id=3)
    assert sorted(more) == [3, 4]
    assert [r[0] for r in more.values()] == [(3 + 1) % 3, (4 + 1) % 3]


def test_rack_alternated_broker_list_matches_kafka():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]


def test_rack_aware_assignment_matches_kafkas_test_case():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas(range(6), racks, 7, 3) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0],
        5: [2, 0, 3], 6: [0, 4, 2]}


@pytest.mark.parametrize("brokers_per_rack,racks,rf", [(2, 3, 3), (3, 2, 2), (2, 2, 3), (1, 3, 2)])
def test_rack_aware_spreads_every_partition_over_as_many_racks_as_it_can(brokers_per_rack, racks, rf):
    rack_of = {b: f"r{b % racks}" for b in range(brokers_per_rack * racks)}
    got = assign_replicas(rack_of, rack_of, 12, rf)
    for replicas in got.values():
        assert len(set(replicas)) == rf
        assert len({rack_of[b] for b in replicas}) == min(rf, racks)


def test_rack_aware_leaders_and_replicas_are_balanced():
    rack_of = {b: f"r{b % 3}" for b in range(6)}
    got = assign_replicas(rack_of, rack_of, 12, 3)
    leaders = Counter(r[0] for r in got.values())
    replicas = Counter(b for r in got.values() for b in r)
    assert set(leaders.values()) == {2}
    assert set(replicas.values()) == {6}


def test_partial_rack_information_is_refused_as_kafka_enforced_mode():
    with pytest.raises(PlacementError, match="rack information"):
        assign_replicas(range(3), {0: "a", 1: "b"}, 3, 2)


@pytest.mark.parametrize("n,partitions,rf", [(3, 6, 3), (4, 8, 2), (5, 10, 3), (6, 6, 2)])
def test_leaders_and_replicas_are_balanced_without_racks(n, partitions, rf):
    got = assign_replicas(range(n), None, partitions, rf)
    leaders = Counter(r[0] for r in got.values())
    replicas = Counter(b for r in got.values() for b in r)
    assert max(leaders.values()) - min(leaders.values()) <= 1
    assert max(replicas.values()) - min(replicas.values()) <= 1
    assert all(len(set(r)) == rf for r in got.values())


def test_errors_have_kafkas_names():
    with pytest.raises(InvalidReplicationFactor, match="larger than available brokers: 2"):
        assign_replicas([0, 1], None, 1, 3)
    with pytest.raises(InvalidReplicationFactor):
        assign_replicas([0, 1], None, 1, 0)
    with pytest.raises(InvalidPartitions):
        assign_replicas([0, 1], None, 0, 1)
    assert InvalidReplicationFactor.kafka_error == "INVALID_REPLICATION_FACTOR"
    assert InvalidPartitions.kafka_error == "INVALID_PARTITIONS"


def test_validate_assignment_rejects_gaps_duplicates_and_unknown_brokers():
    validate_assignment({0: [0, 1], 1: [1, 2]}, [0, 1, 2])
    validate_assignment({3: [0, 1]}, [0, 1], first_partition=3)
    for bad in ({0: [0, 1], 2: [1, 2]}, {0: [0, 0]}, {0: [0, 9]}, {0: [0, 1], 1: [1]}, {}):
        with pytest.raises(InvalidReplicaAssignment):
            validate_assignment(bad, [0, 1, 2])


def _cluster(n, partitions, rf, topic="t"):
    return {(topic, p): r for p, r in assign_replicas(range(n), None, partitions, rf).items()}


def _apply(assignment, moves):
    out = dict(assignment)
    out.update(moves)
    return out


@pytest.mark.parametrize("n,partitions,rf", [(3, 6, 2), (3, 12, 3), (4, 8, 3), (2, 4, 1)])
def test_plan_add_broker_gives_the_new_broker_a_fair_share_with_few_moves(n, partitions, rf):
    before = _cluster(n, partitions, rf)
    moves = plan_add_broker(before, range(n), n)
    after = _apply(before, moves)
    load = Counter(b for r in after.values() for b in r)
    total = partitions * rf
    assert load[n] == total // (n + 1)
    assert max(load.values()) - min(load.values()) <= 1 + (total % (n + 1) > 0)
    # Each moved partition changes exactly one replica (no needless movement) ...
    for tp, replicas in moves.items():
        assert sum(a != b for a, b in zip(before[tp], replicas)) == 1
        assert len(set(replicas)) == rf
    # ... and only as many replicas move as the new broker receives.
    assert len(moves) == load[n]
    leaders = Counter(r[0] for r in after.values())
    assert leaders[n] >= min(partitions // (n + 1), load[n])


def test_plan_remove_broker_moves_exactly_its_replicas_and_keeps_balance():
    before = _cluster(4, 8, 2)
    moves = plan_remove_broker(before, range(4), 3)
    after = _apply(before, moves)
    assert all(3 not in r for r in after.values())
    assert set(moves) == {tp for tp, r in before.items() if 3 in r}
    for tp, replicas in moves.items():
        assert sum(a != b for a, b in zip(before[tp], replicas)) == 1
        assert len(set(replicas)) == 2
    load = Counter(b for r in after.values() for b in r)
    assert max(load.values()) - min(load.values()) <= 1


def test_plan_remove_broker_refuses_when_too_few_brokers_remain():
    with pytest.raises(InvalidReplicationFactor):
        plan_remove_broker(_cluster(3, 3, 3), range(3), 2)


def test_plans_are_deterministic():
    before = {**_cluster(3, 5, 2, "a"), **_cluster(3, 4, 3, "b")}
    first = plan_add_broker(before, range(3), 3)
    for order in itertools.islice(itertools.permutations(sorted(before)), 5):
        shuffled = {tp: before[tp] for tp in order}
        assert plan_add_broker(shuffled, [2, 1, 0], 3) == first


def test_more_replicas_than_a_partition_may_have_is_an_invalid_replication_factor():
    """LeaderAndIsr carries at most REPLICAS_MAX replicas (the board's row): a topic
    with more would be created and then refused by every broker."""
    from node.wire.control import REPLICAS_MAX

    brokers = list(range(REPLICAS_MAX + 4))
    assert len(assign_replicas(brokers, None, 2, REPLICAS_MAX)[0]) == REPLICAS_MAX
    with pytest.raises(InvalidReplicationFactor, match=f"larger than {REPLICAS_MAX}"):
        assign_replicas(brokers, None, 2, REPLICAS_MAX + 1)
    with pytest.raises(InvalidReplicationFactor, match=f"larger than {REPLICAS_MAX}"):
        validate_assignment({0: brokers[:REPLICAS_MAX + 1]}, brokers)
