"""A real child process appends in a loop and is SIGKILLed at seeded random moments.

After each kill the parent recovers the log and checks: every batch flushed before the
kill is there (LEO >= last reported flush), everything appended is there too (a
process kill does not lose the page cache), every batch parses with a valid CRC,
offsets are contiguous from the log start and every value is its own offset.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys

import pytest

from shm import batch as batch_codec
from shm.log import Log

from crash_config import BROKER_ID, CONFIG, PARTITION, TOPIC
from tests.waiting import poll_until

pytestmark = pytest.mark.process

HERE = os.path.dirname(os.path.abspath(__file__))
ROUNDS = 4
SEED = 20261122


def read_report(path: str) -> dict[str, int]:
    last = {"appended": -1, "flushed": -1, "opened": -1}
    with open(path, "rb") as f:
        for line in f.read().split(b"\n")[:-1]:  # only complete lines
            word, number = line.decode().split()
            last[word] = int(number)
    return last


def wait_for(condition, timeout_s: float, what: str) -> None:
    poll_until(condition, timeout_s, what, interval_s=0.005)


def check_log(log: Log) -> int:
    """Read everything back; returns the number of records checked."""
    offset, records = log.log_start_offset, 0
    while offset < log.log_end_offset:
        view = log.read(offset, 256 * 1024)
        for position, header in batch_codec.iter_batches(view):  # verifies every CRC
            batch = batch_codec.parse_batch(view, position)
            assert batch.base_offset == offset, f"gap or overlap at offset {offset}"
            for i, value in enumerate(batch.values.to_pylist()):
                digits = str(offset + i).encode()
                assert value == digits * (len(value) // len(digits)) and value, \
                    f"offset {offset + i} holds {value[:40]!r}"
            offset += batch.record_count
            records += batch.record_count
    assert offset == log.log_end_offset
    return records


@pytest.mark.slow
def test_sigkill_during_appends_loses_nothing_flushed(tmp_path, cluster_id):
    rng = random.Random(SEED)
    data_dir = str(tmp_path)
    report_path = str(tmp_path / "report.txt")
    env = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
    last_leo = 0
    for round_number in range(ROUNDS):
        if os.path.exists(report_path):
            os.unlink(report_path)
        child = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "crash_child.py"), data_dir, cluster_id,
             report_path, str(rng.randrange(2**32))], env=env)
        try:
            wait_for(lambda: os.path.exists(report_path) and
                     read_report(report_path)["opened"] >= 0, 60, "the child to open its log")
            opened = read_report(report_path)["opened"]
            assert opened >= last_leo, "a reopen lost data the parent had seen"
            # Kill at a seeded moment: after a random number of flushes and appends.
            flushes = rng.randint(1, 4)
            target = opened + flushes * CONFIG.flush_interval_messages + rng.randint(0, 400)
            wait_for(lambda: read_report(report_path)["appended"] >= target, 60,
                     f"the child to append up to offset {target}")
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        reported = read_report(report_path)
        assert reported["flushed"] >= 0, "the child never flushed: the kill checks nothing"
        log = Log.open(data_dir, TOPIC, PARTITION, CONFIG, cluster_id=cluster_id,
                       broker_id=BROKER_ID)
        try:
            assert log.log_end_offset >= reported["flushed"], \
                f"flushed up to {reported['flushed']}, recovered only {log.log_end_offset}"
            assert log.log_end_offset >= reported["appended"]
            assert log.recovery.recovery_point <= log.log_end_offset
            assert check_log(log) == log.log_end_offset - log.log_start_offset
            last_leo = log.log_end_offset
        finally:
            if round_number % 2:
                log.abandon()  # leave shared memory for the child to reattach
            else:
                log.close()
    log = Log.open(data_dir, TOPIC, PARTITION, CONFIG, cluster_id=cluster_id,
                   broker_id=BROKER_ID)
    assert log.recovery.indexes_loaded + log.recovery.indexes_reattached > 0
    log.delete()
