"""Child processes of the truncation / retention / roll crash tests.

    crash_ops_child.py random DATA_DIR CLUSTER_ID JOURNAL SEED GENERATION
        a seeded random mix of journaled operations, forever (until SIGKILL)
    crash_ops_child.py zygote CLUSTER_ID
        imports once, then per stdin line ``run DATA_DIR JOURNAL POINT HIT`` forks a
        child that runs ``crash_ops.scripted`` and dies (os._exit, as a SIGKILL: no
        cleanup of any kind) at the HIT-th pass through the crash point POINT
        (``shm.faults``), or runs to the end and writes ``counts`` of every point it
        passed; answers ``exit <status>`` once that child is gone. Forking a
        single-threaded process that has the imports done makes each case cheap.
"""
from __future__ import annotations

import json
import os
import random
import sys
import traceback

from shm import faults, segment

import crash_ops

CRASH_STATUS = 86


def run_random(data_dir: str, cluster_id: str, journal_path: str, seed: str,
               generation: str) -> None:
    rng = random.Random(int(seed))
    log = crash_ops.open_log(data_dir, cluster_id)
    driver = crash_ops.Driver(log, crash_ops.Journal(journal_path), int(generation))
    while True:
        crash_ops.random_step(driver, rng)


def run_scripted(data_dir: str, cluster_id: str, journal_path: str, point: str,
                 hit: int) -> None:
    counts: dict[str, int] = {}

    def hook(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1
        if name == point and counts[name] == hit:
            os._exit(CRASH_STATUS)

    def arm() -> None:
        segment._ZERO_CHUNK = bytes(256)  # truncations zero in several steps
        faults.hook = hook

    journal = crash_ops.Journal(journal_path, fsync=False)
    log = crash_ops.open_log(data_dir, cluster_id)
    crash_ops.scripted(crash_ops.Driver(log, journal, 0), arm)
    journal.write("counts", json.dumps(counts, separators=(",", ":")))
    os._exit(0)  # leave the log as a crash would: the parent recovers it either way


def zygote(cluster_id: str) -> None:
    for line in sys.stdin:
        command, data_dir, journal_path, point, hit = line.split()
        assert command == "run"
        pid = os.fork()
        if pid == 0:
            try:
                run_scripted(data_dir, cluster_id, journal_path, point, int(hit))
            except BaseException:
                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        print("exit", os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "random":
        run_random(*sys.argv[2:7])
    else:
        zygote(sys.argv[2])
