"""Chaos runs through real Kafka clients (``chaos run --client C --group``): the
workload's producers and group consumers are confluent-kafka (or kafkajs) processes on
the brokers' Kafka listener, a leader is killed, the run is valid, its folder says
which client ran, the history has the group's assignments, ``chaos check`` gives the
same verdict again; bad flag combinations are one line and exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.chaos.clients import missing
from bench.chaos.history import read_history
from shm.names import cluster_objects

pytestmark = [pytest.mark.process, pytest.mark.slow]

KILL_LEADER = [{"at_ms": 3000, "duration_ms": 2000, "fault": "kill", "target": "leader"}]


def chaos(*args, timeout=180, env=None):
    return subprocess.run([sys.executable, "-m", "bench.cli", "chaos", *args],
                          capture_output=True, text=True, timeout=timeout, env=env)


def _group_run(tmp_path, client: str, *extra: str) -> None:
    why = missing(client)
    if why:
        pytest.skip(why)
    schedule = tmp_path / "plan.json"
    schedule.write_text(json.dumps(KILL_LEADER))
    run = tmp_path / client
    result = chaos("run", "--dir", str(run), "--client", client, "--group",
                   "--duration", "8", "--schedule", str(schedule), "--producers", "1",
                   "--consumers", "2", "--rate", "100", *extra)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert result.stdout.splitlines()[-1] == "VALID"
    verdict_lines = result.stdout[result.stdout.index("\nclient ") + 1:].splitlines()
    assert verdict_lines[0].startswith(f"client {client} "), verdict_lines[:2]
    verdict = json.loads((run / "verdict.json").read_text())
    assert verdict["valid"] and verdict["lost"] == 0 and verdict["acknowledged"] > 300
    assert verdict["group_lost"] == 0 and verdict["group_double_read"] == 0
    meta = json.loads((run / "run.json").read_text())
    assert meta["client"]["name"] == client and meta["client"]["version"]
    assert meta["client"]["settings"]["producer"], meta["client"]
    assert meta["group"] == "chaos-group"
    faults = json.loads((run / "faults.json").read_text())
    assert [f["fault"] for f in faults] == ["kill"] and faults[0]["end_ns"] > 0
    ops = [op for name in ("c0", "c1") for op in read_history(run / "history" / f"{name}.parquet")]
    assigned = {p for op in ops if op.f == "assign" for p in op.partitions}
    assert assigned == {0, 1, 2}, "the group's members own every partition of chaos"
    assert any(op.f == "poll" and op.reads for op in ops)
    committed = read_history(run / "history" / "observer.parquet")
    assert committed and all(op.f == "committed" for op in committed)
    assert not cluster_objects(json.loads(
        (run / "cluster" / "cluster.json").read_text())["cluster_id"])
    again = chaos("check", str(run))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr
    assert json.loads((run / "verdict.json").read_text()) == verdict
    assert again.stdout.splitlines()[0] == verdict_lines[0]


def test_a_confluent_kafka_group_run_under_a_leader_kill_is_valid(tmp_path):
    _group_run(tmp_path, "confluent-kafka")


def test_a_kafkajs_group_run_under_a_leader_kill_is_valid(tmp_path):
    # kafkajs' own default: its idempotent producer (experimental) rewinds a partition's
    # sequence after a failed Produce and re-partitions the retry, so after a leader kill
    # it acknowledges a value the broker answered as a duplicate of another (lost 1 in 3
    # of 12 runs with it on; the README's client table says so).
    _group_run(tmp_path, "kafkajs", "--idempotence", "off")


@pytest.mark.parametrize("args, env, words", [
    (("--client", "kafka-pithon"), {}, "--client 'kafka-pithon': one of"),
    (("--client", "confluent-kafka", "--value-format", "avro"), {}, "needs --client native"),
    (("--client", "kafka-python", "--group", "--group-protocol", "consumer"), {},
     "speaks the classic group protocol only"),
    (("--client", "native", "--group-protocol", "consumer"), {}, "needs --group"),
    (("--client", "kafkajs"), {"MINIKAFKA_NODE_MODULES": "{tmp}/none"}, "--client kafkajs: "),
])
def test_a_bad_client_flag_is_one_line_and_exit_2(tmp_path, args, env, words):
    environment = {**os.environ, **{k: v.format(tmp=tmp_path) for k, v in env.items()}}
    result = chaos("run", "--dir", str(tmp_path / "x"), *args, timeout=60, env=environment)
    assert result.returncode == 2, result.stdout + result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
