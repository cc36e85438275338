"""python -m bench.kafka_clients, small: every installed client measured on one live
cluster, its table printed, and its runs in the results store with real figures."""
from __future__ import annotations

import importlib.util
import json

import pyarrow.dataset as ds
import pytest

from bench.perf.kafka_clients import run as bench

RECORDS = 3000
WRITES = 40
MODULES = {"confluent-kafka": "confluent_kafka", "kafka-python": "kafka",
           "aiokafka": "aiokafka"}


def _runs(store) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(store.glob("runs/run_id=*/run.json"))]


@pytest.mark.process
@pytest.mark.slow
def test_every_installed_client_is_measured_and_its_runs_are_stored(tmp_path, capsys,
                                                                     cluster_id):
    store = tmp_path / "results"
    assert bench.main(["--records", str(RECORDS), "--writes", str(WRITES), "--dir",
                       str(tmp_path / "bench"), "--results", str(store),
                       "--cluster-id", cluster_id,
                       "--override", "replica.transport=fetch"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[0].endswith(", replica.transport=fetch"), printed[:300]
    expected = {"minikafka"} | {c for c, m in MODULES.items() if importlib.util.find_spec(m)}
    # an installed client is measured, a missing one skipped with one line saying so
    skipped = {line.split()[1].rstrip(":") for line in printed.splitlines()
               if line.startswith("skipping ")}
    assert skipped == set(MODULES) - expected, printed
    table = printed.split("CPU per record")[0]     # the first table: the figures
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()
            if line.split() and line.split()[0] in expected and not line.startswith(" ")}
    assert set(rows) == expected, printed
    for name, cells in rows.items():
        produce, mb, consume, p50, p99 = (float(c.replace(",", "")) for c in cells)
        assert produce > 0 and mb > 0 and consume > 0 and 0 < p50 <= p99, (name, cells)
    if "confluent-kafka" in expected:
        assert "confluent-kafka producer records/s:" in printed
    runs = _runs(store)
    # Per client: a producer run, a single-write run and a consumer run.
    phases = sorted((r["tags"]["client"], r["tags"]["phase"]) for r in runs)
    assert phases == sorted((c, p) for c in expected
                            for p in ("producer", "single writes", "consumer"))
    produce = ds.dataset(store / "samples" / "produce", partitioning="hive").to_table()
    for record in runs:
        client, phase = record["tags"]["client"], record["tags"]["phase"]
        if phase == "consumer":
            # Every client reads the same topic: exactly the records written to it.
            assert record["summary"]["records"] == RECORDS, (client, record["summary"])
            assert record["summary"]["bytes"] == RECORDS * 100
            assert record["summary"]["records_per_s"] > 0
            assert record["summary"]["client_cpu_s"] > 0 <= record["summary"]["brokers_cpu_s"]
            continue
        rows = produce.filter(ds.field("run_id") == record["run_id"]).to_pylist()
        assert len(rows) == (RECORDS if phase == "producer" else WRITES), (client, phase)
        assert all(r["error"] is None and r["latency_ms"] > 0 for r in rows), (client, phase)
        # Each acknowledged record has its own offset in its partition.
        placed = {(r["partition"], r["offset"]) for r in rows}
        assert len(placed) == len(rows) and min(o for _, o in placed) >= 0, (client, phase)
        assert record["summary"]["records"] == len(rows) and \
            record["summary"]["records_per_s"] > 0
        assert record["cluster"]["producer_props"]["acks"] == "all"


def test_an_unknown_client_is_one_line_and_exit_1(capsys):
    assert bench.main(["--clients", "minikafka,nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "unknown nope" in err


def test_a_malformed_override_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--override", "replica.transport"])
    assert exit_.value.code == 2
    assert "--override 'replica.transport': expected KEY=VALUE" in capsys.readouterr().err


def test_kafka_clients_without_a_kafka_listener_are_skipped_with_one_line_each(capsys):
    kept = bench.usable_clients(["minikafka", "confluent-kafka", "aiokafka"], None)
    assert [c.name for c in kept] == ["minikafka"]
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == ["skipping confluent-kafka",
                                                      "skipping aiokafka"]
    assert all("no Kafka listener" in line or "not installed" in line for line in lines)


def test_the_targets_are_judged_run_by_run_against_node_client():
    from bench.perf.kafka_clients import report
    native = {"produce_records_per_s": [1000.0, 400.0, 900.0],
              "consume_records_per_s": [1000.0, 1000.0, 1000.0],
              "write_p50_ms": [1.0, 2.0, 1.0]}
    librdkafka = {"produce_records_per_s": [400.0, 300.0, 500.0],     # 40%, 75%, 56%
                  "consume_records_per_s": [100.0, 700.0, 200.0],     # 10%, 70%, 20%
                  "write_p50_ms": [1.3, 2.1, 1.1]}                    # +0.3, +0.1, +0.1
    lines = report.target_lines("confluent-kafka", librdkafka, native)
    assert lines == [
        "confluent-kafka producer records/s: 56% of node.client's (target >= 50%: met)",
        "confluent-kafka consumer records/s: 20% of node.client's (target >= 50%: MISSED)",
        "confluent-kafka single-write p50: +0.100 ms against node.client's "
        "(target <= +0.2 ms: met)"]
    # Other clients get the same figures without a verdict.
    assert report.target_lines("aiokafka", librdkafka, native)[0] == \
        "aiokafka producer records/s: 56% of node.client's"
