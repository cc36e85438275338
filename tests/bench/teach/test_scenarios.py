"""Every scenario of the catalog runs on real processes and meets its prediction (the
partition scenarios need root for network namespaces and skip without it)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from bench.teach.catalog import CATALOG
from node.cluster import netns

pytestmark = [pytest.mark.process, pytest.mark.slow]
NO_NETNS = netns.available()


def scenario(*args, timeout=300, stdin=None):
    return subprocess.run([sys.executable, "-m", "bench.cli", "scenario", *args],
                          capture_output=True, text=True, timeout=timeout, input=stdin)


@pytest.mark.parametrize("name", [s.name for s in CATALOG])
def test_the_scenario_meets_its_prediction(name, tmp_path):
    entry = next(s for s in CATALOG if s.name == name)
    if entry.netns and NO_NETNS:
        pytest.skip(f"{name}: {NO_NETNS}")
    stepped = name == "min-insync"   # one scenario also runs with --step (Enter per step)
    done = scenario("run", name, "--dir", str(tmp_path / name), "--speed", "2",
                    *(["--step"] if stepped else []), stdin="\n" * 10 if stepped else None)
    out = done.stdout
    if stepped:
        assert "[Enter] to run step 3" in out, out
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "outcome matches the prediction" in out and "NOT as predicted" not in out
    assert out.count("\nstep ") >= 2 and "leader epoch" in out and "ISR" in out
    if entry.netns:
        import json
        ids = [json.loads(p.read_text())["cluster_id"]
               for p in (tmp_path / name).glob("*/cluster.json")]
        assert ids and all(netns.leftovers(i) == [] for i in ids)


def test_the_list_names_every_scenario_and_its_prediction():
    done = scenario("list", timeout=60)
    assert done.returncode == 0
    for s in CATALOG:
        assert s.name in done.stdout and s.prediction in done.stdout


@pytest.mark.parametrize("args, words", [
    (("run", "nonsense"), "no scenario 'nonsense'"),
    (("run", "failover", "--speed", "0"), "--speed must be positive"),
])
def test_bad_use_is_one_line_and_exit_2(args, words):
    done = scenario(*args, timeout=60)
    assert done.returncode == 2 and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
