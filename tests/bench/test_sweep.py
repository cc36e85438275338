"""minikafka bench sweep: workload files, their matrix, and a real (tiny) sweep."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.analysis import analyze
from bench.perf import sweep

WORKLOADS = Path(__file__).resolve().parents[2] / "bench" / "perf" / "workloads"


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return str(path)


def test_the_matrix_is_every_combination_over_the_defaults(tmp_path):
    spec, points = sweep.load(_write(tmp_path, """
name: t
records: 10
matrix:
  acks: ["1", all]
  replication_factor: [1, 3]
"""))
    assert spec["name"] == "t" and len(points) == 4
    assert sorted((p["acks"], p["replication_factor"]) for p in points) == \
        [("1", 1), ("1", 3), ("all", 1), ("all", 3)]
    assert all(p["records"] == 10 and p["record_size"] == 100 for p in points)


def test_keys_that_change_together(tmp_path):
    _, points = sweep.load(_write(tmp_path, """
name: t
matrix:
  - {record_size: 10, records: 5}
  - {record_size: 1000, records: 1}
"""))
    assert [(p["record_size"], p["records"]) for p in points] == [(10, 5), (1000, 1)]


@pytest.mark.parametrize("path", sorted(WORKLOADS.glob("*.yaml")), ids=lambda p: p.stem)
def test_the_shipped_workloads_load(path):
    spec, points = sweep.load(str(path))
    assert spec["name"] == path.stem and len(points) >= 2


@pytest.mark.parametrize("text, words", [
    ("records: 5", "'name' is required"),
    ("name: t\nrecods: 5", "unknown setting 'recods'"),
    ("name: t\nrecords: many", "records must be a number"),
    ("name: t\nacks: 2", "acks must be 0, 1 or all"),
    ("name: t\nmatrix:\n  acks: []", "non-empty list"),
    ("name: t\nrate: 0", "rate must be -1 or positive"),
    ("name: [t", "not YAML"),
])
def test_a_wrong_workload_is_one_line_and_exit_2(tmp_path, text, words):
    result = subprocess.run([sys.executable, "-m", "bench.cli", "bench", "sweep",
                             _write(tmp_path, text), "--results", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert words in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_settings_come_from_the_sweeps_tags():
    run = {"tags": {"settings": {"acks": "all", "rate": 5.0}},
           "arguments": {"num_records": 9}}
    assert analyze.settings_of(run) == {"acks": "all", "rate": 5.0}


@pytest.mark.process
@pytest.mark.slow
def test_a_tiny_sweep_records_one_tagged_run_per_point(tmp_path):
    workload = _write(tmp_path, """
name: tiny
partitions: 1
replication_factor: 1
min_insync_replicas: 1
warmup_records: 50
records: 300
matrix:
  acks: ["1", all]
""")
    store = tmp_path / "results"
    result = subprocess.run([sys.executable, "-m", "bench.cli", "bench", "sweep", workload,
                             "--results", str(store), "--brokers", "1"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    runs = [json.loads(p.read_text()) for p in store.glob("runs/run_id=*/run.json")]
    assert sorted(r["tags"]["settings"]["acks"] for r in runs) == ["1", "all"]
    assert all(r["tags"]["workload"] == "tiny" and r["summary"]["records"] == 300
               for r in runs)
    assert all(r["cluster"]["producer_props"]["acks"] == r["tags"]["settings"]["acks"]
               for r in runs)
    assert "point 1: acks=all" in result.stdout
