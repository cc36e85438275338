"""bench.perf.idempotence's statistics (pure): the paired ratios, the interval of their
median and the verdict on the 5% target."""
from __future__ import annotations

import math
import random

import pytest

from bench.perf import idempotence


def _coverage(n: int, k: int) -> float:
    """P(x_(k) <= median <= x_(n-k+1)) for any continuous distribution."""
    return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n


@pytest.mark.parametrize("n", range(1, 30))
def test_the_interval_is_the_narrowest_order_statistics_with_95_percent(n):
    values = random.Random(n).sample(range(1000), n)
    interval = idempotence.median_interval(values)
    if n < idempotence.ROUNDS_FOR_CI_MIN:
        assert interval is None
        return
    low, high, confidence = interval
    ordered = sorted(values)
    k = ordered.index(low) + 1
    assert ordered[n - k] == high
    assert confidence == pytest.approx(_coverage(n, k)) and confidence >= 0.95
    assert k == n // 2 or _coverage(n, k + 1) < 0.95     # no narrower one holds


def test_the_verdict_needs_the_whole_interval_on_one_side_of_the_target():
    assert idempotence.verdict((0.01, 0.049)) == "met"
    assert idempotence.verdict((0.051, 0.2)) == "not met"
    assert idempotence.verdict((0.02, 0.08)) == "not shown"
    assert idempotence.verdict(None) == "not shown"


def test_the_summary_uses_the_paired_ratios():
    off = [100.0, 200.0, 100.0, 100.0, 100.0, 100.0, 100.0]
    on = [99.0, 198.0, 98.0, 97.0, 99.0, 100.0, 96.0]    # each round its own ratio
    summary = idempotence.summarize(off, on, records=10)
    assert summary["ratio_median"] == pytest.approx(0.99)
    assert (summary["ratio_min"], summary["ratio_max"]) == (0.96, 1.0)
    assert summary["ratio_ci"] == [0.96, 1.0] and summary["verdict"] == "met"
    assert summary["cost_median_percent"] == pytest.approx(1.0)
    line = idempotence.summary_line(summary, 100)
    assert "7 paired rounds" in line and "cost <= 5%: met" in line
    slow = idempotence.summarize(off, [r * 0.9 for r in off], records=10)
    assert slow["verdict"] == "not met"
    few = idempotence.summarize(off[:3], on[:3], records=10)
    assert few["ratio_ci"] is None and few["verdict"] == "not shown"
    assert "no interval" in idempotence.summary_line(few, 100)


@pytest.mark.parametrize("argv", [["--rounds", "0"], ["--warmup-rounds", "-1"],
                                  ["--records", "0"], ["--warm-memory", "-1"]])
def test_bad_flags_are_a_usage_error(argv):
    with pytest.raises(SystemExit) as exit_info:
        idempotence.parse_args(argv)
    assert exit_info.value.code == 2


def test_cpu_seconds_are_read_from_proc_and_a_gone_process_counts_nothing():
    import os
    import subprocess
    import sys
    import time
    target = idempotence.process_cpu_s(os.getpid()) + 0.05
    give_up = time.monotonic() + 10
    while idempotence.process_cpu_s(os.getpid()) < target and time.monotonic() < give_up:
        sum(range(10_000))                                       # burn 50 ms of CPU
    assert idempotence.process_cpu_s(os.getpid()) >= target
    child = subprocess.run([sys.executable, "-c", "sum(range(3_000_000))"], timeout=60)
    assert child.returncode == 0
    assert idempotence.children_cpu_s() > 0
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(timeout=60)
    assert idempotence.process_cpu_s(gone.pid) == 0.0
