"""Real chaos runs: a safe run under faults is valid; an unsafe one loses acknowledged
writes and the checker says so; a bad use is one line and exit 2."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from shm.names import cluster_objects
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]


def chaos(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "bench.cli", "chaos", *args],
                          capture_output=True, text=True, timeout=timeout)


def _scheduled(tmp_path, run, plan: list, *flags):
    """A 15 s run of one partition under the faults of ``plan`` (a schedule.json)."""
    schedule = tmp_path / "plan.json"
    schedule.write_text(json.dumps(plan))
    return chaos("run", "--dir", str(run), "--duration", "15", "--schedule", str(schedule),
                 "--partitions", "1", *flags)


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


def test_an_unclean_election_loses_what_only_the_isr_had(tmp_path):
    """The seeds' acks=all walkthrough, last step: the followers paused until they drop
    out of the ISR, the leader alone acknowledges acks=all writes (min.insync.replicas=1),
    then dies; with unclean election on, a follower that never had them leads."""
    schedule = tmp_path / "plan.json"
    schedule.write_text(json.dumps([
        {"at_ms": 2000, "duration_ms": 6000, "fault": "pause", "target": "followers"},
        {"at_ms": 7500, "duration_ms": 5000, "fault": "kill", "target": "leader"}]))
    run = tmp_path / "unclean"
    result = chaos("run", "--dir", str(run), "--profile", "unclean", "--duration", "16",
                   "--schedule", str(schedule), "--consumers", "0", "--rate", "300",
                   "--partitions", "1")
    verdict = json.loads((run / "verdict.json").read_text())
    assert result.returncode == 1, result.stdout + result.stderr
    assert verdict["lost"] > 0 and verdict["divergent"] == 0, verdict


def test_a_slow_follower_and_a_power_failure_of_the_leader_lose_nothing_under_safe(tmp_path):
    """A follower slowed to bursts of 100 ms a second, then the leader's power cut (its
    unflushed segment bytes gone): the other replicas had every acknowledged write."""
    run = tmp_path / "safe"
    result = _scheduled(tmp_path, run, [
        {"at_ms": 1500, "duration_ms": 5000, "fault": "slow", "target": "followers"},
        {"at_ms": 8000, "duration_ms": 3000, "fault": "power-failure", "target": "leader"}],
        "--rate", "200")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] and verdict["divergent"] == 0 and verdict["acknowledged"] > 500
    faults = {f["fault"]: f for f in json.loads((run / "faults.json").read_text())}
    assert set(faults) == {"slow", "power-failure"}
    lost_records = int(faults["power-failure"]["detail"].split(" lost ")[1].split()[0])
    assert lost_records > 0, "the power cut removed the leader's unflushed records"
    assert not cluster_objects(_cluster_id(run))


def test_a_power_failure_and_a_kill_of_leaders_whose_segments_roll_lose_nothing(tmp_path):
    """--segment-bytes 65536: every replica's log rolls every second or so, so the power
    cut and the kill land on rolls, their background flushes and the recovery of sealed
    segments; under safe every acknowledged write is still there."""
    run = tmp_path / "rolling"
    result = _scheduled(tmp_path, run, [
        {"at_ms": 4000, "duration_ms": 3000, "fault": "power-failure", "target": "leader"},
        {"at_ms": 9500, "duration_ms": 2000, "fault": "kill", "target": "leader"}],
        "--rate", "300", "--segment-bytes", "65536")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] and verdict["divergent"] == 0 and verdict["acknowledged"] > 2000
    assert json.loads((run / "run.json").read_text())["segment_bytes"] == 65536
    faults = [f["fault"] for f in json.loads((run / "faults.json").read_text())]
    assert faults == ["power-failure", "kill"]
    segments = {d.parent.parent.name: len(list(d.glob("*.log")))
                for d in (run / "cluster").glob("broker-*/logs/chaos-0")}
    assert len(segments) == 3 and min(segments.values()) >= 3, segments
    assert not cluster_objects(_cluster_id(run))


def test_a_replay_runs_the_same_faults_in_the_same_order(tmp_path):
    run = tmp_path / "first"
    first = chaos("run", "--dir", str(run), "--duration", "14", "--seed", "8",
                  "--faults", "kill,pause,restart", "--rate", "100", "--consumers", "0")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr
    again = chaos("replay", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    replay = tmp_path / "first-replay"
    assert json.loads((replay / "schedule.json").read_text()) == \
        json.loads((run / "schedule.json").read_text())
    sequence = [[f["fault"] for f in json.loads((r / "faults.json").read_text())]
                for r in (run, replay)]
    assert sequence[0] == sequence[1] and len(sequence[0]) >= 2


def test_a_composed_run_shrinks_the_isr_to_the_leader_then_kills_it(tmp_path):
    """--compose, seed 2: its first round pauses both followers past
    replica.lag.time.max.ms and kills the leader while they are still paused (drawn,
    not scripted); under unclean election a follower that lacks the leader's last
    acks=all writes leads: the checker finds them lost and the verdict shows the overlap."""
    run = tmp_path / "composed"
    result = chaos("run", "--dir", str(run), "--compose", "--profile", "unclean",
                   "--seed", "2", "--faults", "kill,pause", "--duration", "18",
                   "--partitions", "1", "--consumers", "0", "--rate", "300")
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr
    assert "composed (--compose)" in result.stdout
    schedule = json.loads((run / "schedule.json").read_text())
    assert [(p["fault"], p["target"]) for p in schedule] == [("pause", "followers"),
                                                             ("kill", "leader")]
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["lost"] > 0 and verdict["divergent"] == 0, verdict
    [overlap] = verdict["overlaps"]
    assert [f.split()[0] for f in overlap["faults"]] == ["pause", "kill"]
    assert overlap["to_s"] > overlap["from_s"]
    faults = json.loads((run / "faults.json").read_text())
    assert len(faults) == 2 and all(f["end_ns"] > f["start_ns"] for f in faults), faults
    assert not cluster_objects(_cluster_id(run))


@pytest.mark.parametrize("args, words", [
    (("run", "--dir", "{tmp}/x", "--faults", "meteor"), "unknown fault"),
    (("run", "--dir", "{tmp}/x", "--duration", "0"), "must be positive"),
    (("check", "{tmp}"), "not a chaos run"),
    (("run", "--dir", "{tmp}/x", "--compose", "--schedule", "{tmp}/p.json"), "not both"),
    (("run", "--dir", "{tmp}/x", "--segment-bytes", "4096"), "--segment-bytes must be at least"),
    (("sweep", "--dir", "{tmp}/x", "--seeds", "1", "--segment-bytes", "4096"),
     "--segment-bytes must be at least"),
])
def test_a_bad_use_is_one_line_and_exit_2(tmp_path, args, words):
    result = chaos(*[a.format(tmp=tmp_path) for a in args], timeout=60)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def _processes_naming(path) -> list[int]:
    """Pids of the processes whose command line names ``path``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if str(path).encode() in f.read():
                    out.append(int(pid))
        except OSError:
            pass
    return out


def test_a_sweep_stopped_by_sigterm_lets_its_run_stop_its_cluster(tmp_path):
    """SIGTERM (a CI timeout, `kill`) to a sweep mid-seed: the run it waits for stops
    its workers and its cluster, then the sweep says so and exits 130. Before, the
    sweep died at once and SIGKILLed the run, whose coordinator and brokers (in
    sessions of their own) kept running, with their shared memory."""
    root = tmp_path / "sweep"
    sweep = subprocess.Popen([sys.executable, "-m", "bench.cli", "chaos", "sweep", "--dir",
                              str(root), "--seeds", "1-2", "--duration", "60", "--faults",
                              "kill,pause"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    run = root / "seed-1"
    try:
        poll_until(lambda: sweep.poll() is not None or any(
            p.stat().st_size for p in (run / "history").glob("*")), 90,
            "the first seed's workload running")
        assert sweep.poll() is None, sweep.communicate()
        cluster_id = _cluster_id(run)
        assert _processes_naming(run), "the run's cluster"
        sweep.send_signal(signal.SIGTERM)
        out, err = sweep.communicate(timeout=150)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.communicate()
    assert sweep.returncode == 130, out + err
    assert "interrupted during seed 1: its run stopped" in err, err
    assert "Traceback" not in err and "Traceback" not in (root / "seed-1.out").read_text()
    assert _processes_naming(run) == [], "processes of the run left behind"
    assert cluster_objects(cluster_id) == [], "shared memory left behind"
    assert not (root / "seed-2").exists()
