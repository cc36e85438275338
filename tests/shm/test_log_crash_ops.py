"""Crashes during truncation, retention and roll: real child processes, real files.

Two tests share the child (``crash_ops_child.py``), the journal and the checker
(``crash_ops.py``): the recovered log must equal the log before the interrupted
operation or the log after it - never a mix.

- Random timing: a child runs a seeded random mix of append / flush / roll / truncate_to
  / truncate_fully_and_start_at / retention and is SIGKILLed at a seeded moment, over
  several rounds on the same log (recovered by the parent between rounds, cleanly
  closed or abandoned as a crash would).
- Every step: a child runs a fixed script and dies (os._exit) at the n-th pass through
  one named crash point (``shm.faults``); a dry run counts the passes, then every point
  is hit at its first, second, middle and last pass (every pass with
  MK_CRASH_EVERY_PASS=1). Points after a write-ahead record must recover to the
  completed operation.
"""
from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from shm import faults

import crash_ops
from crash_ops import Model, check_recovery, open_log, read_journal, replay
from crash_ops_child import CRASH_STATUS
from tests.waiting import poll_until

pytestmark = pytest.mark.process

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "crash_ops_child.py")
ENV = dict(os.environ, PYTHONPATH=HERE + os.pathsep + os.environ.get("PYTHONPATH", ""))
SEED = int(os.environ.get("MK_CRASH_SEED", "20261122"))  # a failure names its seed
ROUNDS = 10
# Every step is hit at its first, second, middle and last pass; MK_CRASH_EVERY_PASS=1
# hits every pass (129 cases instead of 74).
EVERY_PASS = os.environ.get("MK_CRASH_EVERY_PASS") == "1"
# Operations whose crash points all come after their write-ahead record (the
# truncation intent, the log start checkpoint): recovery must complete them.
COMPLETED_BY_RECOVERY = {"truncate_to", "truncate_fully", "retention"}
# A roll's durable steps (its sealed segment's index files, the fsyncs) run on the
# flusher thread, as Kafka's scheduled flush-log: their points pass while the child goes on.
ROLL_FLUSH_POINTS = {"roll:indexes-persisted", "roll:directory-synced"}
DRIVER_OPERATIONS = {"append", "flush", "roll", "truncate_to", "truncate_fully", "retention"}


def wait_for(condition, timeout_s: float, what: str) -> None:
    poll_until(condition, timeout_s, what, interval_s=0.002)


def journal_lines(path: str) -> int:
    return len(read_journal(path)) if os.path.exists(path) else 0


@pytest.mark.slow
def test_sigkill_at_random_moments_of_truncation_retention_and_roll_recovers_before_or_after(
        tmp_path, cluster_id):
    rng = random.Random(SEED)
    data_dir = str(tmp_path / "data")
    model = Model()
    interrupted_ops = collections.Counter()
    for round_number in range(ROUNDS):
        journal = str(tmp_path / f"journal-{round_number}")
        child = subprocess.Popen(
            [sys.executable, CHILD, "random", data_dir, cluster_id, journal,
             str(rng.randrange(2**32)), str(round_number * 1_000_000)], env=ENV)
        try:
            steps = rng.randint(5, 150)
            wait_for(lambda: journal_lines(journal) >= steps or child.poll() is not None, 60,
                     f"{steps} journal lines")
            assert child.poll() is None, f"the child died on its own ({child.returncode})"
            time.sleep(rng.random() * 0.005)
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        lines = read_journal(journal)
        _, candidates, interrupted = replay(model, lines)
        interrupted_ops[interrupted.split()[0]] += 1
        log = open_log(data_dir, cluster_id)
        try:
            model = check_recovery(log, candidates, interrupted,
                                   f"round {round_number} (seed {SEED})")
        finally:
            if round_number % 2:
                log.abandon()  # as a crash: the next child reattaches shared memory
            else:
                log.close()
    log = open_log(data_dir, cluster_id)
    assert crash_ops.recovered_state(log) == model
    log.delete()
    # The kills must land in more than plain appends for this test to mean anything.
    assert sum(interrupted_ops.values()) == ROUNDS
    assert len(interrupted_ops) >= 2, interrupted_ops
    print("interrupted:", dict(interrupted_ops))


class Zygote:
    """The scripted child's parent: runs one case per call (see crash_ops_child.py)."""

    def __init__(self, cluster_id: str) -> None:
        self.process = subprocess.Popen([sys.executable, CHILD, "zygote", cluster_id],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=ENV)

    def run(self, data_dir: str, journal: str, point: str, hit: int) -> int:
        self.process.stdin.write(f"run {data_dir} {journal} {point} {hit}\n")
        self.process.stdin.flush()
        words = self.process.stdout.readline().split()
        assert words and words[0] == "exit", f"the zygote died: {words}"
        return int(words[1])

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


def recover_and_check(data_dir: str, journal: str, cluster_id: str, context: str):
    lines = [words for words in read_journal(journal) if words[0] != "counts"]
    _, candidates, interrupted = replay(Model(), lines)
    log = open_log(data_dir, cluster_id)
    try:
        got = check_recovery(log, candidates, interrupted, context)
    finally:
        log.delete()
    return got, candidates, interrupted, log.recovery


@pytest.mark.slow
def test_crash_at_every_step_of_truncation_retention_and_roll_recovers_before_or_after(
        tmp_path, cluster_id):
    zygote = Zygote(cluster_id)
    try:
        data_dir, journal = str(tmp_path / "dry"), str(tmp_path / "dry.journal")
        assert zygote.run(data_dir, journal, "none", 0) == 0
        counts = json.loads(read_journal(journal)[-1][1])
        points = [p for p in faults.POINTS if p not in faults.CLEAN_POINTS]
        assert set(counts) == set(points), \
            f"the script never passes {sorted(set(points) - set(counts))}"
        recover_and_check(data_dir, journal, cluster_id, "no crash")
        cases = 0
        for point in points:
            passes = counts[point]
            hits = set(range(1, passes + 1))
            if not EVERY_PASS:
                hits &= {1, 2, (passes + 1) // 2, passes}
            for hit in sorted(hits):
                case = f"{point.replace(':', '-')}-{hit}"
                data_dir, journal = str(tmp_path / case), str(tmp_path / f"{case}.journal")
                assert zygote.run(data_dir, journal, point, hit) == CRASH_STATUS, case
                context = f"crash at pass {hit} of {passes} through {point}"
                got, candidates, interrupted, report = recover_and_check(
                    data_dir, journal, cluster_id, context)
                operation = point.split(":")[0]
                if operation in COMPLETED_BY_RECOVERY:
                    assert interrupted.split()[0] == operation, (context, interrupted)
                    assert got != candidates[0], \
                        f"{context}: recovery did not finish the {interrupted} whose " \
                        f"intent was durable"
                if operation in {"truncate_to", "truncate_fully"}:
                    assert report.completed_operations, (context, report)
                elif point in ROLL_FLUSH_POINTS:
                    # On the flusher thread: any later operation may be running when it
                    # dies, or none (it died between two of the driver's operations: CI
                    # run 47, a loaded machine); the check above holds the log to that
                    # operation's before or after, or to the last one's after, all the same.
                    assert interrupted.split()[0] in DRIVER_OPERATIONS | {"nothing"}, \
                        (context, interrupted)
                elif operation == "roll":
                    assert interrupted.split()[0] in {"roll", "append"}, (context, interrupted)
                cases += 1
        assert cases >= 2 * len(points)
    finally:
        zygote.close()
