"""The zk benchmark runs end to end and prints its figures as one JSON line."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.perf.zk import FIGURES

from .workers import REPO_ROOT

pytestmark = pytest.mark.process


@pytest.mark.slow
def test_bench_zk_prints_positive_figures():
    run = subprocess.run([sys.executable, "-m", "bench.perf.zk", "--ops", "200"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert len(lines) == 1, run.stdout
    figures = json.loads(lines[0])
    assert set(figures) == {"server", *FIGURES}
    assert figures["server"] == "zk_lite"
    for key in FIGURES:
        assert isinstance(figures[key], (int, float)) and figures[key] > 0, (key, figures[key])
