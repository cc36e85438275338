"""bench.perf.groups runs end to end on a small topic and prints its figures, for the
paper's groups and for the brokers' coordinator (KIP-848)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]


@pytest.mark.parametrize("protocol", ["zookeeper", "consumer", "classic"])
def test_the_groups_bench_prints_its_figures(tmp_path, protocol):
    result = subprocess.run(
        [sys.executable, "-m", "bench.perf.groups", "--records", "30000", "--repeats", "1",
         "--session-ms", "2000", "--dir", str(tmp_path), "--group-protocol", protocol],
        capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert re.search(r"read by a group of 3 member processes: [\d,]+ records/s", out)
    assert re.search(r"commits by one member: [\d,]+/s synchronous", out)
    close = re.search(r"rebalance after a clean close\(\): median ([\d,]+) ms", out)
    kill = re.search(r"rebalance after SIGKILL: median ([\d,]+) ms", out)
    assert close and kill
    # A killed member's partitions wait for its session (2 s) to end; a closed one's
    # do not.
    assert int(kill.group(1).replace(",", "")) >= 1500
    assert int(close.group(1).replace(",", "")) < int(kill.group(1).replace(",", ""))
