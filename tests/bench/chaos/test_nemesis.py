"""The nemesis's schedules: drawn from a seed (replayable), loaded from JSON (validated)."""
from __future__ import annotations

import pytest

from bench.chaos import nemesis

ALL = list(nemesis.FAULTS)


@pytest.mark.parametrize("seed", range(200))
def test_a_drawn_schedule_is_replayable_and_leaves_time_to_heal(seed):
    schedule = nemesis.plan(seed, ALL, 40)
    assert schedule == nemesis.plan(seed, ALL, 40) == nemesis.load(nemesis.dump(schedule))
    end = 0
    for fault in schedule:
        assert fault.at_ms >= end, "faults never overlap"
        assert fault.fault in nemesis.FAULTS
        end = fault.at_ms + fault.duration_ms
        if fault.fault.startswith("coordinator"):
            assert fault.target == "zk"
    assert end <= 40_000 - nemesis.HEAL_TAIL_MS


def test_different_seeds_give_different_schedules():
    assert len({tuple(nemesis.plan(s, ALL, 60)) for s in range(20)}) > 15


@pytest.mark.parametrize("entries, words", [
    ({"at_ms": 1}, "JSON list"),
    ([{"at_ms": 1, "fault": "kill"}], "duration_ms"),
    ([{"at_ms": 1, "duration_ms": 5, "fault": "meteor"}], "unknown fault"),
    ([{"at_ms": -1, "duration_ms": 5, "fault": "kill"}], "negative"),
])
def test_a_bad_schedule_is_one_clear_error(entries, words):
    with pytest.raises(nemesis.ScheduleError, match=words):
        nemesis.load(entries)


def test_unknown_faults_are_refused():
    with pytest.raises(nemesis.ScheduleError, match="meteor"):
        nemesis.plan(1, ["kill", "meteor"], 30)


# ------------------------------------------------------------- partition targets
# The resolution of a partition's target against the cluster's state, with a stand-in
# for the cluster (its mesh's node list and a partition state): the pure part of the
# nemesis. Real cuts on real namespaces: tests/bench/chaos/test_chaos_netns.py.

class _Mesh:
    nodes = ["zk", "b0", "b1", "b2", "p0", "c0"]


class _State:
    leader, isr = 1, (1, 2, 0)


class _Cluster:
    mesh = _Mesh()
    broker_ids = [0, 1, 2]

    def partition_state(self, topic, partition):
        return _State()

    def controller_id(self):
        return 2


def _links(target, seed=0):
    running_nemesis = nemesis.Nemesis(_Cluster(), [], "chaos", seed)
    return {frozenset(pair) for pair in running_nemesis.links_of(target)}


def _pairs(*text):
    return {frozenset(p.split("|")) for p in text}


def test_the_seed_scenarios_cut_the_links_they_name():
    assert _links("leader|zk") == _pairs("b1|zk")                                   # 4
    assert _links("leader|followers") == _pairs("b1|b2", "b1|b0")                  # 2
    assert _links("controller|zk") == _pairs("b2|zk")                              # 8
    assert _links("isolate:leader") == _pairs("b1|zk", "b1|b0", "b1|b2", "b1|p0",  # 6
                                              "b1|c0")
    follower = _links("follower|leader", seed=3)                                   # 1
    assert follower in (_pairs("b1|b2"), _pairs("b1|b0"))
    assert _links("controller|broker", seed=1) <= _pairs("b2|b0", "b2|b1")         # 7
    assert len(_links("controller|broker", seed=1)) == 1


def test_halves_and_bridge_split_the_servers_and_spare_the_bridge():
    for seed in range(20):
        halves = _links("halves", seed)
        nodes = set().union(*halves)
        assert nodes == {"zk", "b0", "b1", "b2"} and len(halves) == 4  # 2 x 2 across
        bridge = _links("bridge", seed)
        assert len(bridge) == 2 and len(set().union(*bridge)) == 3     # 1 x 2, bridge spared


@pytest.mark.parametrize("target", ["isolate:b9", "nonsense", "leader|mars"])
def test_a_partition_target_that_names_nothing_is_refused(target):
    with pytest.raises(ValueError):
        _links(target)


def test_drawn_partitions_and_slow_and_power_failures_have_targets():
    schedule = nemesis.plan(7, ["partition", "slow", "power-failure"], 120)
    assert {p.fault for p in schedule} == {"partition", "slow", "power-failure"}
    for p in schedule:
        if p.fault == "partition":
            assert p.target in nemesis.PARTITION_TARGETS
        else:
            assert p.target in ("random", "leader")


def test_trogdor_style_targets_are_accepted_as_a_list():
    [planned] = nemesis.load([{"at_ms": 10, "duration_ms": 5, "fault": "power-failure",
                               "targets": [0, 2]}])
    assert planned.target == "0,2"
