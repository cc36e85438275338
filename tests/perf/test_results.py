"""node.perf.results: the store's layout, atomicity and errors, without a cluster."""
from __future__ import annotations

import argparse
import json

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from node.perf import results
from node.tools.common import ToolError


def _run(store, tool="bench.test", **flags):
    return results.Run.start(str(store), tool, argparse.Namespace(**flags), argv=["x"])


def test_a_finished_run_is_one_folder_per_part_and_spark_style_partitions(tmp_path):
    store = tmp_path / "store"
    for n in (3, 5):
        run = _run(store, rate=n, unserializable=object())
        run.add_samples("request", pa.table({"scenario": ["a"] * n, "round": [0] * n,
                                             "latency_ms": [float(i) for i in range(n)]}))
        folder = run.finish(summary={"n": n}, cluster={"brokers": 3})
        record = json.loads((folder / "run.json").read_text())
        assert record["run_id"] == run.run_id and record["arguments"] == {"rate": n}
        assert record["summary"] == {"n": n} and record["argv"] == ["x"]
        assert record["samples"] == {"request": f"samples/request/run_id={run.run_id}/"
                                                f"part-0.parquet"}
    table = ds.dataset(store / "samples" / "request", partitioning="hive").to_table()
    counts = {}
    for run_id in table["run_id"].to_pylist():
        counts[run_id] = counts.get(run_id, 0) + 1
    assert sorted(counts.values()) == [3, 5]
    assert not list(store.rglob("*.tmp"))


def test_an_abandoned_run_leaves_nothing(tmp_path):
    run = _run(tmp_path)
    run.add_samples("request", pa.table({"latency_ms": [1.0]}))
    assert list(tmp_path.rglob("*.tmp"))
    run.abandon()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not list(tmp_path.rglob("run_id=*"))


def test_a_kind_is_written_once_and_must_be_known(tmp_path):
    run = _run(tmp_path)
    run.add_samples("request", pa.table({"latency_ms": [1.0]}))
    with pytest.raises(AssertionError):
        run.add_samples("request", pa.table({"latency_ms": [1.0]}))
    with pytest.raises(AssertionError):
        run.add_samples("nonsense", pa.table({"x": [1]}))
    run.abandon()


def test_an_unwritable_store_is_refused_before_the_run(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ToolError, match="cannot write there"):
        _run(blocker / "store")
