"""bench.perf.peers: its table and flags (pure), and a short real run of the peers here."""
from __future__ import annotations

import json
import shutil

import pytest

from bench.perf import peers


def test_the_table_gives_ratios_to_the_minikafka_producer():
    results = {"minikafka": {"single": {"p50": 0.5, "p99": 1.0},
                             "single_raw": {"p50": 0.4, "p99": 0.8},
                             "throughput": {"records_per_s": 1000, "mb_per_s": 0.1}},
               "redis": {"single": {"p50": 0.25, "p99": 2.0},
                         "throughput": {"records_per_s": 500, "mb_per_s": 0.05}}}
    lines = peers.table(results)
    p50 = next(line for line in lines if line.startswith("single p50"))
    assert "0.5 (1.00x)" in p50 and "0.4 (0.80x)" in p50 and "0.25 (0.50x)" in p50
    throughput = next(line for line in lines if line.startswith("throughput records/s"))
    assert "500 (0.50x)" in throughput and throughput.split()[-1] == "-"   # no NATS


@pytest.mark.parametrize("argv", [["--peers", "kafka"], ["--peers", ","], ["--records", "0"]])
def test_bad_flags_are_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        peers.main(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize("peer", ["redis", "nats"])
def test_a_peer_runs_or_says_why_not(peer, capsys):
    assert peers.main(["--peers", peer, "--records", "50", "--warmup", "10",
                       "--throughput-records", "2000"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    binary = {"redis": "redis-server", "nats": "nats-server"}[peer]
    if shutil.which(binary) is None:
        assert "installed" in result["skipped"][peer]   # says why, then: nothing ran here
        pytest.skip(result["skipped"][peer])
    if peer in result["skipped"]:
        pytest.skip(result["skipped"][peer])   # the optional client is not installed
    figures = result["results"][peer]
    assert 0 < figures["single"]["p50"] <= figures["single"]["p99"]
    assert figures["throughput"]["records_per_s"] > 0
