"""minikafka analyze over synthetic results stores whose figures are known exactly."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pyarrow as pa
import pytest

from bench.analysis import analyze
from node.perf import results

T0_NS = 1_800_000_000 * 1_000_000_000      # a whole second, UTC
MS = 1_000_000


def _produce_run(store, n: int, spacing_ms: int, latency_of, *, acks: str,
                 throughput: float) -> str:
    args = argparse.Namespace(num_records=n, record_size=100, throughput=throughput)
    run = results.Run.start(str(store), "producer-perf-test", args, argv=["test"])
    send = [T0_NS + i * spacing_ms * MS for i in range(n)]
    latency = [float(latency_of(i)) for i in range(n)]
    ts = pa.timestamp("us", tz="UTC")
    run.add_samples("produce", pa.table({
        "record": pa.array(range(n), type=pa.int64()),
        "send_time": pa.array([s // 1000 for s in send], type=ts),
        "ack_time": pa.array([(s + int(l * MS)) // 1000 for s, l in zip(send, latency)],
                             type=ts),
        "partition": pa.array([0] * n, type=pa.int32()),
        "offset": pa.array(range(n), type=pa.int64()),
        "latency_ms": pa.array(latency),
        "bytes": pa.array([100] * n, type=pa.int32()),
        "error": pa.array([None] * n, type=pa.string())}))
    run.finish(summary={}, cluster={"producer_props": {"acks": acks,
                                                       "bootstrap.servers": "x:1"}},
               topic={"name": "t", "partitions": 1, "replication_factor": 3})
    return run.run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    # A: 1,000 records 10 ms apart, latency 1..100 ms repeating: p50 50, p99 99, max 100;
    # first send T0, last ack T0 + 9,990 + 100 ms.
    a = _produce_run(root, 1000, 10, lambda i: i % 100 + 1, acks="1", throughput=100)
    # B: 2,000 records 1 ms apart, 2 ms each: last ack T0 + 1,999 + 2 ms.
    b = _produce_run(root, 2000, 1, lambda i: 2, acks="all", throughput=1000)
    run = results.Run.start(str(root), "consumer-perf-test", argparse.Namespace(),
                            argv=["test"])
    run.add_samples("consume", pa.table({
        "second": pa.array([(T0_NS + s * 1_000_000_000) // 1000 for s in range(4)],
                           type=pa.timestamp("us", tz="UTC")),
        "records": pa.array([100, 200, 300, 400], type=pa.int64()),
        "bytes": pa.array([10_000, 20_000, 30_000, 40_000], type=pa.int64())}))
    run.finish(summary={})
    return root, a, b


pytestmark = pytest.mark.spark


def test_the_tables_hold_the_known_figures_and_every_output_exists(store, tmp_path, capsys):
    root, a, b = store
    out = tmp_path / "report"
    assert analyze.main([str(root), "--out", str(out), "--master", "local[1]"]) == 0
    printed = capsys.readouterr().out
    import pyarrow.parquet as pq
    runs = {r["run_id"]: r for r in pq.read_table(out / "tables" / "produce_runs.parquet")
            .to_pylist()}
    assert (runs[a]["records"], runs[a]["errors"], runs[a]["bytes"]) == (1000, 0, 100_000)
    assert (runs[a]["p50_ms"], runs[a]["p95_ms"], runs[a]["p99_ms"], runs[a]["max_ms"]) == \
        (50.0, 95.0, 99.0, 100.0)
    assert runs[a]["seconds"] == pytest.approx(10.09)
    assert runs[a]["records_per_s"] == pytest.approx(1000 / 10.09)
    assert (runs[b]["p50_ms"], runs[b]["p99_ms"], runs[b]["max_ms"]) == (2.0, 2.0, 2.0)
    assert runs[b]["records_per_s"] == pytest.approx(2000 / 2.001)
    assert runs[b]["mb_per_s"] == pytest.approx(200_000 / 2.001 / 1e6)
    per_second = pq.read_table(out / "tables" / "produce_per_second.parquet").to_pylist()
    a_seconds = [r for r in per_second if r["run_id"] == a]
    acks_s = [(T0_NS + i * 10 * MS + (i % 100 + 1) * MS) // 1_000_000_000 for i in range(1000)]
    expected = [acks_s.count(s) for s in sorted(set(acks_s))]
    assert [r["records"] for r in a_seconds] == expected      # acks per one-second window
    assert a_seconds[1]["p99_ms"] == 99.0 and a_seconds[1]["max_ms"] == 100.0
    # The comparison keys on what differs (acks, throughput), with ratios to A.
    rows = pq.read_table(out / "tables" / "comparison.parquet").to_pylist()
    assert [r["run_id"] for r in rows] == [a, b]
    assert [r["acks"] for r in rows] == ["1", "all"]
    assert "record_size" not in rows[0]
    assert rows[0]["throughput_ratio"] == 1.0
    assert rows[1]["throughput_ratio"] == pytest.approx((2000 / 2.001) / (1000 / 10.09))
    assert rows[1]["p99_ratio"] == pytest.approx(2 / 99)
    # acks=1 and acks=all are two curves, not one line through both runs.
    curve = pq.read_table(out / "tables" / "throughput_latency.parquet").to_pylist()
    assert sorted((r["series"], r["run_id"]) for r in curve) == \
        [("minikafka, acks=1", a), ("minikafka, acks=all", b)]
    consume = pq.read_table(out / "tables" / "consume_runs.parquet").to_pylist()
    assert (consume[0]["records"], consume[0]["seconds"], consume[0]["records_per_s"]) == \
        (1000, 4, 250.0)
    for name in ("produce_throughput", "produce_latency", "throughput_latency",
                 "consume_throughput"):
        assert (out / "plots" / f"{name}.png").stat().st_size > 5000
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") == 4 and a in report
    assert (out / "tables" / "comparison.csv").read_text().startswith('"run_id"')
    assert f"produce {a}: 1000 records" in printed and "p99 99.000 ms" in printed


def test_the_baseline_can_be_chosen_and_must_exist(store, tmp_path, capsys, monkeypatch):
    root, a, b = store
    out = tmp_path / "r"
    assert analyze.main([str(root), "--out", str(out), "--master", "local[1]",
                         "--baseline", b]) == 0
    import pyarrow.parquet as pq
    rows = pq.read_table(out / "tables" / "comparison.parquet").to_pylist()
    assert rows[1]["run_id"] == b and rows[1]["throughput_ratio"] == 1.0
    capsys.readouterr()
    # An unknown baseline is refused before Spark starts.
    monkeypatch.setattr(analyze, "spark_session", lambda master: pytest.fail("Spark started"))
    assert analyze.main([str(root), "--out", str(out), "--baseline", "nope"]) == 1
    assert "--baseline nope: not a producer run of this store" in capsys.readouterr().err


def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "bench.cli", "analyze", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_bad_input_is_one_line_and_a_nonzero_exit(store, tmp_path):
    root, a, _ = store
    missing = _cli(str(tmp_path / "nowhere"))
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    empty = _cli(str(empty_dir))
    for result, words in ((missing, "no such results directory"), (empty, "no runs")):
        assert result.returncode == 1, result.stderr
        assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
        assert words in result.stderr and "Traceback" not in result.stderr
    # Java missing: the hint, before Spark is started.
    no_java = _cli(str(root), "--out", str(tmp_path / "x"),
                   env={"PATH": "/nonexistent", "HOME": str(tmp_path)})
    assert no_java.returncode == 1
    assert "openjdk-17-jre-headless" in no_java.stderr.strip().splitlines()[-1]


def test_a_corrupt_sample_file_is_named(store, tmp_path, capfd):
    """In this process (the CLI's one-line errors are test_bad_input's): what Spark's
    JVM writes to this process's stderr is captured too (capfd)."""
    import shutil
    root, a, _ = store
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    [part] = list((copy / "samples" / "produce" / f"run_id={a}").glob("*.parquet"))
    part.write_bytes(b"PAR1 not really parquet at all")
    capfd.readouterr()
    assert analyze.main([str(copy), "--out", str(tmp_path / "o"), "--master", "local[1]"]) == 1
    stderr = capfd.readouterr().err
    last = stderr.strip().splitlines()[-1]
    assert "cannot read the produce samples" in last, stderr
    assert "Traceback" not in stderr and "\tat org.apache" not in stderr


# ------------------------------------------------------------------ chaos runs

S = 1_000_000_000


def _chaos_run(root, name: str, ops: list[tuple[str, str, int]], faults: list[dict],
               verdict: dict, seed: int):
    import json
    import pyarrow.parquet as pq
    run = root / name
    (run / "history").mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"profile": "safe", "seed": seed}))
    (run / "faults.json").write_text(json.dumps(faults))
    (run / "verdict.json").write_text(json.dumps(verdict))
    pq.write_table(pa.table({
        "process": pa.array(["p0"] * len(ops)), "type": pa.array([o[0] for o in ops]),
        "f": pa.array([o[1] for o in ops]),
        "time_ns": pa.array([o[2] for o in ops], type=pa.int64())}),
        run / "history" / "p0.parquet")


def _verdict(recovery, **counts):
    base = {"valid": True, "acknowledged": 15, "lost": 0, "duplicate": 0, "inconsistent": 0,
            "nonmonotonic": 0, "skip": 0, "unexpected": 0, "longest_gap_ms": 1500.0}
    base.update(counts)
    base["recovery_ms"] = recovery
    return base


@pytest.fixture(scope="module")
def chaos_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("chaos")
    t = T0_NS
    # r1: 10 acknowledged in second 0, 2 failed in second 1 (a kill), 5 acknowledged in 2.
    ops = []
    for i in range(10):
        ops += [("invoke", "send", t + i * 50 * MS), ("ok", "send", t + i * 50 * MS + MS)]
    ops += [("invoke", "send", t + S + 100 * MS), ("fail", "send", t + S + 200 * MS),
            ("invoke", "send", t + S + 300 * MS), ("info", "send", t + S + 900 * MS)]
    for i in range(5):
        ops += [("invoke", "send", t + 2 * S + i * MS), ("ok", "send", t + 2 * S + i * MS + MS)]
    ops += [("invoke", "poll", t + 2 * S), ("ok", "poll", t + 2 * S + MS)]   # not a send
    _chaos_run(root, "r1", ops, [{"fault": "kill", "target": "0", "start_ns": t + S,
                                  "end_ns": t + 2 * S, "error": None}],
               _verdict([["kill", "0", 1000.0]]), 1)
    # r2: one acknowledgement a second for 4 s; a pause and a kill; 3 duplicates.
    ops = [(kind, "send", t + s * S + d * MS) for s in range(4)
           for kind, d in (("invoke", 0), ("ok", 1))]
    _chaos_run(root, "r2", ops,
               [{"fault": "pause", "target": "1", "start_ns": t + S // 2, "end_ns": t + S,
                 "error": None},
                {"fault": "kill", "target": "2", "start_ns": t + 2 * S, "end_ns": t + 3 * S,
                 "error": None}],
               _verdict([["pause", "1", 200.0], ["kill", "2", 3000.0]], duplicate=3,
                        acknowledged=4), 2)
    return root


def test_chaos_runs_give_timelines_recovery_per_fault_and_anomalies(chaos_runs, tmp_path,
                                                                   capsys):
    import pyarrow.parquet as pq
    out = tmp_path / "report"
    assert analyze.main([str(chaos_runs), "--out", str(out)]) == 0
    seconds = pq.read_table(out / "tables" / "chaos_per_second.parquet").to_pylist()
    r1 = [(r["second"], r["acknowledged"], r["failed"]) for r in seconds if r["run"] == "r1"]
    assert r1 == [(0, 10, 0), (1, 0, 2), (2, 5, 0)]
    r2 = [(r["second"], r["acknowledged"]) for r in seconds if r["run"] == "r2"]
    assert r2 == [(0, 1), (1, 1), (2, 1), (3, 1)]
    recovery = {r["fault"]: r for r in
                pq.read_table(out / "tables" / "chaos_recovery.parquet").to_pylist()}
    assert (recovery["kill"]["faults"], recovery["kill"]["median_ms"],
            recovery["kill"]["worst_ms"]) == (2, 2000.0, 3000.0)
    assert (recovery["pause"]["faults"], recovery["pause"]["median_ms"]) == (1, 200.0)
    anomalies = {r["run"]: r for r in
                 pq.read_table(out / "tables" / "chaos_anomalies.parquet").to_pylist()}
    assert anomalies["r2"]["duplicate"] == 3 and anomalies["r1"]["lost"] == 0
    for name in ("timeline_r1.png", "timeline_r2.png", "recovery.png"):
        assert (out / "plots" / name).stat().st_size > 5000, name
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 3 and "Recovery per fault type" in html
    printed = capsys.readouterr().out
    assert "chaos r1: profile safe, seed 1, 15 acknowledged, lost 0" in printed
    assert "recovery after kill: 2 fault(s), median 2,000 ms, worst 3,000 ms" in printed
    # One run folder alone works too.
    assert analyze.main([str(chaos_runs / "r2"), "--out", str(tmp_path / "one")]) == 0
    assert (tmp_path / "one" / "plots" / "timeline_r2.png").exists()
