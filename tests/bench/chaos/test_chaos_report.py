"""The chaos run's printed reports, from recorded figures (no processes): the client line
comes first in a verdict and in a sweep's summary, group lines only for group runs, a
failed workload process is named and keeps a valid history from reading VALID."""
from __future__ import annotations

from bench.chaos.sweep import print_summary, summarize
from bench.chaos.verdict import print_verdict

CLIENT = {"name": "confluent-kafka", "version": "2.16.1 (librdkafka 2.16.0)",
          "settings": {"producer": {"acks": "all"}, "consumer": {"group.id": "chaos-group"}}}


def _verdict(**extra) -> dict:
    counts = dict.fromkeys(("sends", "acknowledged", "failed", "unknown", "read", "lost",
                            "duplicate", "inconsistent", "nonmonotonic", "skip", "unexpected",
                            "aborted_read", "divergent", "group_lost", "group_double_read",
                            "commit_backwards"), 0)
    return {**counts, "valid": True, "acknowledged": 10, "recovery_ms": [["kill", "0", 120.0]],
            "longest_gap_ms": 130.0, "examples": {}, **extra}


def _meta(**extra) -> dict:
    return {"profile": "safe", "seed": 3, "duration": 8.0, "schedule": [{}], "client": CLIENT,
            **extra}


def test_the_verdict_starts_with_the_client_and_shows_group_lines_only_for_groups(capsys):
    print_verdict(_meta(group="chaos-group"), _verdict(group_stats={"members": ["a", "b"],
                                                                    "assign": 2}))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == ("client confluent-kafka 2.16.1 (librdkafka 2.16.0); consumer "
                        "group.id=chaos-group; producer acks=all")
    assert "group chaos-group (classic protocol, the client's default)" in lines[1]
    assert any(line.split()[0] == "group_lost" for line in lines)
    assert any(line.startswith("  group: 2 members, 2 assignments") for line in lines)
    assert lines[-1] == "VALID"
    print_verdict(_meta(client=None), _verdict())
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "client native" and not any("group" in line for line in lines)


def test_a_failed_workload_process_is_named_and_the_run_is_not_plain_valid(capsys):
    print_verdict(_meta(), _verdict(worker_failures={"p0": "exit 1: FATAL sequence"}))
    out = capsys.readouterr().out
    assert "workload process p0 failed: exit 1: FATAL sequence" in out
    assert out.splitlines()[-1] == "VALID history, but 1 workload process(es) failed"


def test_a_sweep_summary_counts_group_anomalies_and_failed_workers(capsys):
    rows = [{"seed": 1, "verdict": _verdict(commit_backwards=1, valid=False)},
            {"seed": 2, "verdict": _verdict(worker_failures={"p1": "exit 1"})},
            {"seed": 3, "verdict": None}]
    summary = summarize(rows)
    assert summary["invalid"] == [1] and summary["worker_failures"] == [2]
    assert summary["failed_runs"] == [3] and summary["commit_backwards"] == 1
    assert summary["acknowledged"] == 20
    summary.update(client=CLIENT, group=True)
    print_summary("safe", summary)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("client confluent-kafka 2.16.1")
    assert "commit_backwards 1" in lines[3]
    assert lines[-1].startswith("invalid runs: [1]; runs where a workload process failed: [2]")


def test_idempotence_flag_overrides_the_profile_for_the_producers_only():
    from bench.chaos.options import idempotence, worker_options
    assert idempotence("safe") == "on" and idempotence("acks1") == "off"
    assert idempotence("safe", "off") == "off"
    assert worker_options("safe", "producer", "kafkajs", True, None, "off") == \
        {"acks": "all", "idempotence": "off"}
    assert worker_options("safe", "producer", "kafkajs", True, None) == \
        {"acks": "all", "idempotence": "on"}
    assert "idempotence" not in worker_options("safe", "consumer", "kafkajs", True, None, "off")
