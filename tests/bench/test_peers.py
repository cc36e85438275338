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


def test_several_runs_give_the_median_of_each_figure_and_the_p50s_spread():
    runs = [{"single": {"p50": 0.5, "p99": 0.9}, "single_raw": {"p50": 0.4, "p99": 0.8},
             "throughput": {"records_per_s": 1000, "mb_per_s": 0.1}},
            {"single": {"p50": 0.7, "p99": 1.3}, "single_raw": {"p50": 0.45, "p99": 0.7},
             "throughput": {"records_per_s": 3000, "mb_per_s": 0.3}},
            {"single": {"p50": 0.6, "p99": 1.0}, "single_raw": {"p50": 0.35, "p99": 0.75},
             "throughput": {"records_per_s": 2000, "mb_per_s": 0.2}}]
    assert peers.median_results(runs) == {
        "single": {"p50": 0.6, "p99": 1.0}, "single_raw": {"p50": 0.4, "p99": 0.75},
        "throughput": {"records_per_s": 2000, "mb_per_s": 0.2}}
    # a workload only some runs have (as NATS's throughput after a failure) counts where it is
    assert peers.median_results([{"single": {"p50": 1.0}}, {"single": {"p50": 2.0},
                                 "throughput": {"records_per_s": 7}}]) == \
        {"single": {"p50": 1.5}, "throughput": {"records_per_s": 7}}
    lines = peers.spread({"minikafka": runs, "redis": [{"single": {"p50": 0.2}}]})
    assert lines == ["minikafka Producer: single p50 over 3 runs 0.5-0.7 ms",
                     "minikafka raw: single p50 over 3 runs 0.35-0.45 ms"]   # one Redis run: none


@pytest.mark.parametrize("argv", [["--peers", "kafka"], ["--peers", ","], ["--records", "0"],
                                  ["--runs", "0"], ["--runs", "101"]])
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


@pytest.mark.process
@pytest.mark.slow
def test_several_runs_start_the_peer_afresh_and_report_medians(capsys):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    assert peers.main(["--peers", "redis", "--records", "30", "--warmup", "5",
                       "--throughput-records", "1000", "--runs", "3"]) == 0
    out = capsys.readouterr().out
    result = json.loads(out.strip().splitlines()[-1])
    if "redis" in result["skipped"]:
        pytest.skip(result["skipped"]["redis"])   # the optional client is not installed
    runs = result["per_run"]["redis"]
    assert result["runs"] == 3 and len(runs) == 3
    assert result["results"]["redis"] == peers.median_results(runs)
    assert "Redis WAIT 2: single p50 over 3 runs" in out
