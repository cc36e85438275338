"""bench.perf.groups runs end to end on a small topic and prints its figures, for the
paper's groups and for the brokers' coordinator (KIP-848, classic): the three one after
the other on one cluster and topic (each with its own groups)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.process, pytest.mark.slow]
PROTOCOLS = ("zookeeper", "consumer", "classic")


def test_the_groups_bench_prints_its_figures_for_each_group_protocol(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "bench.perf.groups", "--records", "10000", "--repeats", "1",
         "--session-ms", "2000", "--commit-seconds", "0.5", "--async-commits", "200",
         "--dir", str(tmp_path), "--group-protocol", ",".join(PROTOCOLS)],
        capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-2000:]
    runs = re.split(r"(?m)^(?=[\d,]+ records of \d+ B in 6 partitions; group protocol )",
                    result.stdout)[1:]
    assert [re.search(r"group protocol (\w+)", run).group(1) for run in runs] == \
        list(PROTOCOLS), result.stdout
    for protocol, out in zip(PROTOCOLS, runs):
        assert re.search(r"read by a group of 3 member processes: [\d,]+ records/s", out)
        assert re.search(r"commits by one member: [\d,]+/s synchronous", out)
        close = re.search(r"rebalance after a clean close\(\): median ([\d,]+) ms", out)
        kill = re.search(r"rebalance after SIGKILL: median ([\d,]+) ms", out)
        assert close and kill, (protocol, out)
        # A killed member's partitions wait for its session (2 s) to end; a closed one's
        # do not.
        assert int(kill.group(1).replace(",", "")) >= 1500, (protocol, out)
        assert int(close.group(1).replace(",", "")) < int(kill.group(1).replace(",", "")), \
            (protocol, out)
