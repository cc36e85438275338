"""The throughput-latency curves of ``minikafka analyze``: one per client and setting."""
from __future__ import annotations

from bench.analysis.series import NATIVE_CLIENT, curves, series_of


def _run(run_id: str, acks: str, throughput: float, client: str | None = None,
         linger_ms: str | None = None) -> dict:
    props = {"acks": acks, "bootstrap.servers": "127.0.0.1:1"}
    if linger_ms is not None:
        props["linger.ms"] = linger_ms
    return {"run_id": run_id, "tool": "producer-perf-test",
            "arguments": {"num_records": 1000, "record_size": 100, "throughput": throughput},
            "cluster": {"producer_props": props},
            "topic": {"name": f"topic-{run_id}", "partitions": 6, "replication_factor": 3},
            "tags": {"client": client} if client else {}}


def _point(run_id: str, records_per_s: float) -> dict:
    return {"run_id": run_id, "records_per_s": records_per_s, "p50_ms": records_per_s / 1e4,
            "p99_ms": records_per_s / 1e3}


def test_acks_1_and_acks_all_are_two_curves_each_ordered_by_throughput():
    runs = {r["run_id"]: r for r in (
        _run("a", "1", 1000), _run("b", "all", 1000), _run("c", "1", -1),
        _run("d", "-1", -1))}
    per_run = [_point("a", 1000), _point("b", 990), _point("c", 90_000), _point("d", 40_000)]
    rows = curves(runs, per_run)
    by_series = {}
    for row in rows:
        by_series.setdefault(row["series"], []).append(row["run_id"])
    # The rate and the topic's name move a run along its curve; acks=-1 is acks=all.
    assert by_series == {f"{NATIVE_CLIENT}, acks=1": ["a", "c"],
                         f"{NATIVE_CLIENT}, acks=all": ["b", "d"]}
    assert [r["records_per_s"] for r in rows if r["run_id"] in ("b", "d")] == [990, 40_000]


def test_clients_and_other_differing_settings_make_their_own_curves():
    runs = {r["run_id"]: r for r in (
        _run("n", "all", -1), _run("c0", "all", -1, "confluent-kafka", linger_ms="0"),
        _run("c5", "all", -1, "confluent-kafka", linger_ms="5"),
        _run("c5b", "all", 500, "confluent-kafka", linger_ms="5"))}
    rows = curves(runs, [_point(r, 100.0 * (i + 1)) for i, r in enumerate(runs)])
    labels = {row["run_id"]: row["series"] for row in rows}
    assert labels["c5"] == labels["c5b"] == "confluent-kafka, acks=all, linger.ms=5"
    assert labels["c0"] == "confluent-kafka, acks=all, linger.ms=0"
    assert labels["n"] == f"{NATIVE_CLIENT}, acks=all"
    assert series_of(runs["c5"]) == {"client": "confluent-kafka", "acks": "all",
                                     "linger.ms": "5", "record_size": 100,
                                     "topic.partitions": 6,
                                     "topic.replication_factor": 3}
