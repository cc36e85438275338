"""Composed schedules (``--compose``): rounds of one or two overlapping faults, drawn
from a seed (replayable), each healed inside its round, one power cut per round at most."""
from __future__ import annotations

import pytest

from bench.chaos import compose
from bench.chaos import nemesis

ALL = list(nemesis.FAULTS)
SWEEP = ["kill", "pause", "restart", "controller", "coordinator", "coordinator-pause",
         "slow", "power-failure"]


def _end(p):
    return p.at_ms + p.duration_ms


@pytest.mark.parametrize("seed", range(100))
@pytest.mark.parametrize("faults", [ALL, SWEEP], ids=["all", "sweep"])
def test_a_composed_schedule_is_replayable_and_heals_inside_its_rounds(seed, faults):
    schedule = compose.plan(seed, faults, 60)
    assert schedule == compose.plan(seed, faults, 60) == nemesis.load(nemesis.dump(schedule))
    rounds = compose.rounds(schedule)
    assert rounds and sum(map(len, rounds)) == len(schedule)
    previous_end = 0
    for round_ in rounds:
        start, end = min(p.at_ms for p in round_), max(_end(p) for p in round_)
        assert start - previous_end >= nemesis.GAP_MS[0] or previous_end == 0
        assert len(round_) <= compose.ACTIVE_AT_ONCE_MAX
        if len(round_) == 2:
            a, b = round_
            assert min(_end(a), _end(b)) - max(a.at_ms, b.at_ms) >= 200, "they overlap"
        power = [p for p in round_ if p.fault == "power-failure"]
        assert len(power) <= 1, "one broker per round loses its unflushed tail"
        assert all(p.target in ("random", "leader") for p in power)
        previous_end = end
    assert previous_end <= 60_000 - nemesis.HEAL_TAIL_MS, "every fault healed before the end"
    for p in schedule:
        assert p.fault in faults and p.duration_ms > 0
        if p.fault == "partition":
            assert p.target in nemesis.PARTITION_TARGETS
        elif p.fault in nemesis.BROKER_FAULTS:
            assert p.target in nemesis.TARGETS
        elif p.fault.startswith("coordinator"):
            assert p.target == "zk"
        elif p.fault == "late-write":
            assert p.target == "random"
        else:
            assert p.target == "controller"


def test_composed_schedules_overlap_most_rounds_and_try_every_named_pattern():
    rounds = [r for seed in range(50) for r in compose.rounds(compose.plan(seed, ALL, 60))]
    pairs = [r for r in rounds if len(r) == 2]
    assert len(pairs) > len(rounds) / 2
    shapes = {tuple(sorted((p.fault, p.target) for p in r)) for r in pairs}
    # the ISR shrunk to the leader, then the leader lost
    assert (("kill", "leader"), ("pause", "followers")) in shapes
    assert (("partition", "leader|followers"), ("power-failure", "leader")) in shapes
    # a kill during a controller move
    assert any({"controller-move", "kill"} == {p.fault for p in r} for r in pairs)
    # a partition while a broker is paused
    assert any({"pause", "partition"} == {p.fault for p in r} for r in pairs)


def test_the_isr_pattern_kills_the_leader_after_the_followers_fell_out_and_before_they_return():
    lag_ms, seen = 4000, 0
    for seed in range(30):
        for round_ in compose.rounds(compose.plan(seed, ["pause", "kill"], 60, lag_ms=lag_ms)):
            shape = {p.fault: p for p in round_}
            if shape.keys() == {"pause", "kill"} and shape["pause"].target == "followers":
                pause, kill = shape["pause"], shape["kill"]
                assert kill.target == "leader"
                assert kill.at_ms - pause.at_ms > lag_ms          # out of the ISR by then
                assert kill.at_ms < _end(pause) < _end(kill)      # back while it is down
                seen += 1
    assert seen > 5


def test_only_the_allowed_faults_are_drawn():
    for seed in range(20):
        assert {p.fault for p in compose.plan(seed, ["kill"], 60)} == {"kill"}
    with pytest.raises(nemesis.ScheduleError, match="meteor"):
        compose.plan(1, ["kill", "meteor"], 30)


def test_a_different_seed_gives_a_different_schedule_and_a_short_run_none():
    assert len({tuple(compose.plan(s, SWEEP, 60)) for s in range(20)}) > 15
    assert compose.plan(1, SWEEP, 5) == []


def test_the_plain_schedule_is_unchanged_for_the_same_seed():
    """Without --compose, a seed draws what it drew before --compose existed."""
    assert [(p.at_ms, p.duration_ms, p.fault, p.target) for p in nemesis.plan(
        3, ["kill", "pause", "restart", "controller", "coordinator"], 30)] == [
        (2000, 1974, "coordinator", "zk"), (7703, 1534, "restart", "leader"),
        (13116, 1268, "coordinator", "zk"), (15937, 2921, "restart", "random"),
        (21143, 3937, "controller", "controller")]


def test_overlaps_are_the_stretches_with_two_faults_active():
    assert compose.overlaps([("a", 0, 10), ("b", 5, 15), ("c", 20, 30)]) == [(5, 10, ["a", "b"])]
    assert compose.overlaps([("a", 0, 10), ("b", 10, 15)]) == []            # touching is not
    assert compose.overlaps([("a", 0, 10), ("b", 2, 4), ("c", 3, 12)]) == [
        (2, 10, ["a", "b", "c"])]
    assert compose.overlaps([]) == []
