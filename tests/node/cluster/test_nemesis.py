"""The nemesis's schedules: drawn from a seed (replayable), loaded from JSON (validated)."""
from __future__ import annotations

import pytest

from node.cluster import nemesis as N

ALL = list(N.FAULTS)


@pytest.mark.parametrize("seed", range(200))
def test_a_drawn_schedule_is_replayable_and_leaves_time_to_heal(seed):
    schedule = N.plan(seed, ALL, 40)
    assert schedule == N.plan(seed, ALL, 40) == N.load(N.dump(schedule))
    end = 0
    for fault in schedule:
        assert fault.at_ms >= end, "faults never overlap"
        assert fault.fault in N.FAULTS
        end = fault.at_ms + fault.duration_ms
        if fault.fault.startswith("coordinator"):
            assert fault.target == "zk"
    assert end <= 40_000 - N.HEAL_TAIL_MS


def test_different_seeds_give_different_schedules():
    assert len({tuple(N.plan(s, ALL, 60)) for s in range(20)}) > 15


@pytest.mark.parametrize("entries, words", [
    ({"at_ms": 1}, "JSON list"),
    ([{"at_ms": 1, "fault": "kill"}], "duration_ms"),
    ([{"at_ms": 1, "duration_ms": 5, "fault": "meteor"}], "unknown fault"),
    ([{"at_ms": -1, "duration_ms": 5, "fault": "kill"}], "negative"),
])
def test_a_bad_schedule_is_one_clear_error(entries, words):
    with pytest.raises(N.ScheduleError, match=words):
        N.load(entries)


def test_unknown_faults_are_refused():
    with pytest.raises(N.ScheduleError, match="meteor"):
        N.plan(1, ["kill", "meteor"], 30)
