"""Relative paths, as a new user types them: every ``minikafka`` argument that names a
file or a directory is made absolute where it is parsed (``node.paths.absolute_path``),
and the commands work when run from a scratch directory with relative paths (the
supervisor's processes run in the cluster's directory, not the caller's)."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from bench.perf.sweep import workload_path
from bench.cli import build_parser
from node.cluster import Cluster
from node.paths import absolute_path, child_env
from shm.names import cluster_objects
from tests.dashboard_process import start_dashboard, stop_dashboard
from tests.conftest import new_cluster_id
from tests.waiting import poll_until

# The destinations that name a path, in every subcommand of minikafka.
PATH_DESTS = {"dir", "results", "out", "run", "workload", "samples_out", "producer_config",
              "consumer_config", "schedule", "data_dir", "schema_file", "path_to_json_file",
              "topics_to_move_json_file", "reassignment_json_file"}
# Commands that read their files once, in the directory they were started in, and pass
# no path to another process: a relative path is already right there.
READ_IN_PLACE = {"zk", "mirror-maker", "schemas", "leader-election", "reassign-partitions"}


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(command words, parser) for every parser under ``parser``, itself included."""
    yield prefix, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _subcommands(sub, prefix + (name,))


def test_every_path_argument_of_every_command_is_made_absolute_when_parsed():
    typed = []
    for words, parser in _subcommands(build_parser()):
        for action in parser._actions:
            # a flag with choices (chaos run's --workload plain|txn) names no file
            if action.dest in PATH_DESTS and action.choices is None and words[:1] and \
                    words[0] not in READ_IN_PLACE:
                typed.append((" ".join(words), action.dest))
                assert action.type in (absolute_path, workload_path), (words, action.dest)
    commands = {words.split()[0] for words, _ in typed}
    assert {"cluster", "chaos", "scenario", "dashboard", "top", "analyze", "bench",
            "producer-perf-test", "consumer-perf-test", "end-to-end-latency"} <= commands


@pytest.mark.parametrize("argv, dest", [
    (["cluster", "up", "--dir", "c"], "dir"),
    (["cluster", "down", "--dir", "c"], "dir"),
    (["cluster", "add-broker", "--dir", "c"], "dir"),
    (["chaos", "run", "--dir", "r", "--schedule", "s.json"], "schedule"),
    (["chaos", "sweep", "--dir", "r"], "dir"),
    (["chaos", "check", "r"], "run"),
    (["scenario", "run", "acks1", "--dir", "s"], "dir"),
    (["dashboard", "--dir", "c"], "dir"),
    (["top", "--dir", "c"], "dir"),
    (["analyze", "r", "--out", "o"], "out"),
    (["bench", "sweep", "w.yaml", "--results", "r"], "results"),
    (["producer-perf-test", "--topic", "t", "--num-records", "1", "--record-size", "1",
      "--throughput", "-1", "--results", "r", "--samples-out", "s.parquet"], "samples_out"),
    (["consumer-perf-test", "--topic", "t", "--messages", "1", "--dir", "c"], "dir"),
    (["end-to-end-latency", "--topic", "t", "--num-messages", "1", "--results", "r"],
     "results"),
])
def test_a_relative_path_is_resolved_against_the_current_directory(argv, dest, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    value = getattr(build_parser().parse_args(argv), dest)
    assert Path(value).is_absolute() and Path(value).parent == tmp_path, value


def test_a_shipped_workload_is_found_by_name_and_a_file_of_that_name_wins(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = Path(workload_path("rate-sweep"))
    assert shipped.is_file() and shipped.name == "rate-sweep.yaml"
    (tmp_path / "rate-sweep").write_text("name: mine\n")
    assert workload_path("rate-sweep") == str(tmp_path / "rate-sweep")
    assert workload_path("w.yaml") == str(tmp_path / "w.yaml")


@pytest.mark.process
def test_the_supervisor_takes_a_relative_directory(tmp_path, monkeypatch, cluster_id):
    """The Python API too: the brokers run in the cluster's directory, so the paths the
    supervisor writes into their configs and command lines must not be relative."""
    monkeypatch.chdir(tmp_path)
    cluster = Cluster.up("rel", brokers=1, cluster_id=cluster_id)
    try:
        assert cluster.dir == tmp_path / "rel"
        assert [p.state() for p in cluster.processes.values()] == ["alive", "alive"]
        monkeypatch.chdir("/")
        opened = Cluster.open(tmp_path / "rel")
        try:
            assert [row.state for row in opened.status()] == ["alive", "alive"]
        finally:
            opened.close()
    finally:
        cluster.down(grace_s=5)


def minikafka(cwd: Path, *args, timeout_s: float = 120) -> subprocess.CompletedProcess:
    """``minikafka ARGS`` run in ``cwd``, importing this checkout's code."""
    return subprocess.run([sys.executable, "-m", "bench.cli", *map(str, args)], cwd=cwd,
                          env=child_env(), capture_output=True, text=True,
                          timeout=timeout_s)


def ok(cwd: Path, *args, **kwargs) -> str:
    done = minikafka(cwd, *args, **kwargs)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


@pytest.mark.process
@pytest.mark.slow
def test_a_cluster_its_tools_and_its_dashboard_from_a_scratch_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    cluster_id = new_cluster_id()
    out = ok(work, "cluster", "up", "--dir", "mycluster", "--brokers", 3,
             "--cluster-id", cluster_id, "--timeout", 60)
    try:
        assert f"up in {work / 'mycluster'}" in out
        assert "broker 2" in ok(work, "cluster", "status", "--dir", "mycluster")
        assert "controller broker" in ok(work, "top", "--dir", "mycluster", "--once")
        bootstrap = Cluster.open(work / "mycluster").bootstrap_servers
        ok(work, "topics", "--bootstrap-server", bootstrap, "--create", "--topic", "t",
           "--partitions", 1, "--replication-factor", 3)
        ok(work, "producer-perf-test", "--topic", "t", "--num-records", 200,
           "--record-size", 10, "--throughput", -1, "--producer-props",
           f"bootstrap.servers={bootstrap}", "acks=all", "--results", "store",
           "--samples-out", "samples.parquet")
        ok(work, "consumer-perf-test", "--topic", "t", "--messages", 200, "--local",
           "--dir", "mycluster", "--results", "store")
        ok(work, "end-to-end-latency", "--bootstrap-server", bootstrap, "--topic", "t",
           "--num-messages", 20, "--record-size", 10, "--results", "store")
        tools = sorted(json.loads(p.read_text())["tool"]
                       for p in (work / "store" / "runs").glob("*/run.json"))
        assert tools == ["consumer-perf-test", "end-to-end-latency", "producer-perf-test"]
        assert (work / "samples.parquet").is_file()
        _dashboard_shows_the_topic(work)
    finally:
        done = minikafka(work, "cluster", "down", "--dir", "mycluster", "--grace", 5)
        assert done.returncode == 0, done.stderr
        assert cluster_objects(cluster_id) == []


def _dashboard_shows_the_topic(work: Path) -> None:
    dashboard = start_dashboard("--dir", "mycluster", cwd=work, env=child_env())
    try:
        def topic_shown():
            with urllib.request.urlopen(dashboard.at("state"), timeout=10) as r:
                snap = json.loads(r.read())["snapshot"]
            return snap and any(p["topic"] == "t" for p in snap["partitions"])
        poll_until(topic_shown, 30, "topic t in the dashboard's /state", interval_s=0.2)
    finally:
        stop_dashboard(dashboard)


@pytest.mark.process
@pytest.mark.slow
def test_a_chaos_run_checked_again_and_a_scenario_from_a_scratch_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    out = ok(work, "chaos", "run", "--dir", "run1", "--duration", 3, "--faults", "kill",
             timeout_s=180)
    assert "VALID" in out
    cluster_id = json.loads((work / "run1" / "cluster" / "cluster.json").read_text())
    assert cluster_objects(cluster_id["cluster_id"]) == []
    assert "VALID" in ok(work, "chaos", "check", "run1", timeout_s=180)
    out = ok(work, "scenario", "run", "acks1", "--dir", "s1", "--speed", 4, timeout_s=180)
    assert "outcome matches the prediction" in out
    assert (work / "s1").is_dir()
    ok(work, "bench", "sweep", "rate-sweep", "--results", "r", "--dry-run")
