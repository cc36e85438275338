"""The storage benchmark runs end to end and prints one JSON line of positive figures."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.perf.storage import RECORDS_PER_BATCH, build_pool, walk
from shm.names import PREFIX, SHM_DIR

pytestmark = pytest.mark.process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEYS = {"append_mb_s", "os_write_mb_s", "append_ratio", "read_mb_s", "local_read_mb_s",
        "recover_reattach_s", "recover_rebuild_s"}


def test_pool_batches_are_about_one_mib_of_100_byte_records():
    pool = build_pool(3)
    assert len(pool) == 3
    for batch in pool:
        assert 1024 * 1024 - 112 < len(batch) <= 1024 * 1024
    records, size, next_offset = walk(memoryview(pool[0]), verify_crc=True)
    assert (records, size, next_offset) == (RECORDS_PER_BATCH, len(pool[0]), RECORDS_PER_BATCH)


def test_walk_refuses_a_gap_in_offsets():
    a, b = build_pool(2)
    from shm.batch import stamp
    stamp(a, 0, 0)
    stamp(b, RECORDS_PER_BATCH + 1, 0)
    with pytest.raises(AssertionError, match="offsets jump"):
        walk(memoryview(bytes(a) + bytes(b)))


@pytest.mark.slow
def test_benchmark_prints_one_json_line_with_positive_figures(tmp_path):
    before = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX)}
    out = subprocess.run([sys.executable, "-m", "bench.perf.storage", "--size-mb", "32",
                          "--dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1, out.stdout
    figures = json.loads(lines[0])
    assert set(figures) == KEYS
    assert all(isinstance(v, (int, float)) and v > 0 for v in figures.values()), figures
    assert figures["append_ratio"] == pytest.approx(
        figures["append_mb_s"] / figures["os_write_mb_s"], rel=0.01)
    assert os.listdir(tmp_path) == []  # its temporary directory is gone
    after = {e for e in os.listdir(SHM_DIR) if e.startswith(PREFIX)}
    assert not {e for e in after - before if e.startswith("mk-bench")}
