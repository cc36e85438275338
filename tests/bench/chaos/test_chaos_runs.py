"""Real chaos runs: a safe run under faults is valid; an unsafe one loses acknowledged
writes and the checker says so; a bad use is one line and exit 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shm.names import cluster_objects

pytestmark = [pytest.mark.process, pytest.mark.slow]


def chaos(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "node.cli", "chaos", *args],
                          capture_output=True, text=True, timeout=timeout)


def _cluster_id(run):
    return json.loads((run / "cluster" / "cluster.json").read_text())["cluster_id"]


def test_a_safe_run_under_kills_pauses_and_coordinator_faults_is_valid(tmp_path):
    run = tmp_path / "safe"
    result = chaos("run", "--dir", str(run), "--duration", "20", "--seed", "3",
                   "--faults", "kill,pause,restart,controller,coordinator", "--rate", "150")
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] and verdict["lost"] == 0 and verdict["acknowledged"] > 500
    faults = json.loads((run / "faults.json").read_text())
    assert len(faults) >= 3 and all(f["end_ns"] > f["start_ns"] for f in faults)
    assert "VALID" in result.stdout and "acks" in result.stdout
    assert not cluster_objects(_cluster_id(run))
    again = chaos("check", str(run))
    assert again.returncode == 0 and json.loads((run / "verdict.json").read_text()) == verdict


def test_an_acks1_run_with_leader_kills_loses_acknowledged_writes(tmp_path):
    """acks=1, the followers paused while the leader acknowledges, then the leader
    killed: a follower that never saw those writes is elected (the seeds' loss)."""
    schedule = tmp_path / "plan.json"
    schedule.write_text(json.dumps([
        {"at_ms": 2000, "duration_ms": 2500, "fault": "pause", "target": "followers"},
        {"at_ms": 3500, "duration_ms": 4000, "fault": "kill", "target": "leader"}]))
    run = tmp_path / "acks1"
    result = chaos("run", "--dir", str(run), "--profile", "acks1", "--duration", "14",
                   "--schedule", str(schedule), "--producers", "2", "--consumers", "0",
                   "--rate", "500", "--partitions", "1")
    verdict = json.loads((run / "verdict.json").read_text())
    assert result.returncode == 1, result.stdout + result.stderr
    assert verdict["lost"] > 0 and "lost" in verdict["examples"]
    assert "INVALID" in result.stdout


@pytest.mark.parametrize("args, words", [
    (("run", "--dir", "{tmp}/x", "--faults", "meteor"), "unknown fault"),
    (("run", "--dir", "{tmp}/x", "--duration", "0"), "must be positive"),
    (("check", "{tmp}"), "not a chaos run"),
])
def test_a_bad_use_is_one_line_and_exit_2(tmp_path, args, words):
    result = chaos(*[a.format(tmp=tmp_path) for a in args], timeout=60)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
