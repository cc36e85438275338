"""Crashes inside the cleaner's swap: a real child process dies (os._exit, as SIGKILL)
at every named ``clean:*`` crash point (``shm.faults``), at its first and last pass;
the parent reopens the log and compares it record by record with the log before the
clean and the log after it: it must be one of them, never a mix, and the clean's
commit point (the swap intent, written first) means it must be the cleaned one."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shm import batch as codec
from shm import faults

from clean_crash_child import CRASH_STATUS, fill, open_log

pytestmark = [pytest.mark.process, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "clean_crash_child.py")
ENV = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))


def records(log) -> list[tuple]:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        view = log.read(offset, 1 << 20)
        for position, header in codec.iter_batches(view):  # CRCs checked
            out += codec.parse_batch(view, position).records()
            offset = header.next_offset
    return out


def run(data_dir: str, cluster_id: str, point: str, hit: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHILD, data_dir, cluster_id, point, str(hit)],
                          env=ENV, capture_output=True, text=True, timeout=120)


def reopen_records(data_dir: str, cluster_id: str):
    log = open_log(data_dir, cluster_id)
    try:
        log.check()
        leftovers = [n for n in os.listdir(log.directory)
                     if n.endswith((".cleaned", ".swap", ".deleted")) or n == "cleaner-swap"]
        assert not leftovers, leftovers
        transactions = (log.ongoing_transactions(),
                        log.aborted_transactions(log.log_start_offset, log.log_end_offset))
        return (records(log), transactions), log.recovery, len(log.segments)
    finally:
        log.delete()


def test_crash_at_every_step_of_a_swap_recovers_the_old_or_the_new_segments_whole(
        tmp_path, cluster_id):
    sys.path.insert(0, HERE)
    old_log = open_log(str(tmp_path / "old"), cluster_id)
    try:
        fill(old_log)
        old = (records(old_log), (old_log.ongoing_transactions(), old_log.aborted_transactions(
            old_log.log_start_offset, old_log.log_end_offset)))
        old_segments = len(old_log.segments)
    finally:
        old_log.delete()
    dry = run(str(tmp_path / "dry"), cluster_id, "none", 0)
    assert dry.returncode == 0, dry.stderr
    counts = json.loads(dry.stdout.strip().splitlines()[-1])
    assert set(faults.CLEAN_POINTS) <= set(counts), \
        f"the swap never passes {sorted(set(faults.CLEAN_POINTS) - set(counts))}"
    new, _, new_segments = reopen_records(str(tmp_path / "dry"), cluster_id)
    assert len(new[0]) < len(old[0]) and new_segments < old_segments  # the clean did something
    assert new[1][0] == old[1][0] and new[1][0]     # the open transaction stays open
    # Aborted data went but a producer's last record (and so its abort's entry).
    assert 0 < len(new[1][1]) < len(old[1][1])
    cases = 0
    for point in sorted(counts):  # the swap's points and the segment deletions' in it
        for hit in sorted({1, counts[point]}):
            case = f"{point.replace(':', '-')}-{hit}"
            child = run(str(tmp_path / case), cluster_id, point, hit)
            assert child.returncode == CRASH_STATUS, (case, child.stderr)
            got, report, _ = reopen_records(str(tmp_path / case), cluster_id)
            assert got in (old, new), f"{case}: recovered a mix of old and new segments"
            # Every point comes after the swap intent: recovery finishes the swap.
            assert got == new, f"{case}: recovery undid a committed swap"
            if point != "clean:checkpoint-written":
                assert any(op.startswith("clean_swap(") for op in report.completed_operations), \
                    (case, report)
            cases += 1
    assert cases >= len(faults.CLEAN_POINTS)


def test_a_crash_before_the_swap_leaves_the_old_segments_and_no_cleaned_files(
        tmp_path, cluster_id):
    """Killed while the .cleaned files exist but before the intent: the old log."""
    data_dir = str(tmp_path / "d")
    log = open_log(data_dir, cluster_id)
    fill(log)
    old = (records(log), (log.ongoing_transactions(),
                          log.aborted_transactions(log.log_start_offset, log.log_end_offset)))
    cleaned = log.cleanable(5_000).build(now_ms=5_000)
    assert any(n.endswith(".cleaned") for n in os.listdir(log.directory))
    log.abandon()
    got, _, _ = reopen_records(data_dir, cluster_id)
    assert got == old
    for output in cleaned.outputs:
        if output.fd >= 0:
            os.close(output.fd)
