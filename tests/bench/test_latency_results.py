"""bench.perf.latency --breakdown --results: the traced writes' stamps land in the store."""
from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from bench.perf import latency

pytestmark = [pytest.mark.process, pytest.mark.slow]


def test_the_breakdown_is_stored_stamp_by_stamp(tmp_path, capsys):
    store = tmp_path / "results"
    assert latency.main(["--breakdown", "--requests", "60", "--warmup", "10", "--rate",
                         "500", "--results", str(store)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    table = ds.dataset(store / "samples" / "breakdown", partitioning="hive").to_table()
    assert table.num_rows == printed["traced"] > 0
    stamps = ("send", "receive", "append", *latency.FOLLOWER_STAMPS, "high_watermark",
              "answer", "client_receive")
    for row in table.to_pylist():
        path = [row[s] for s in stamps]
        assert path == sorted(path), row
    placement = printed["placement"]
    assert set(placement) <= {"1", "2"}
    assert sum(g["writes"] for g in placement.values()) == printed["traced"]
    assert abs(sum(g["share"] for g in placement.values()) - 1) < 0.01
    [run] = list((store / "runs").iterdir())
    assert json.loads((run / "run.json").read_text())["summary"]["traced"] == table.num_rows
