"""Child process for the crash test: append forever, report progress, wait for SIGKILL.

Usage: crash_child.py DATA_DIR CLUSTER_ID REPORT_PATH SEED

Every record's value is its offset in ASCII, so the parent can check content after
recovery. After each append it writes ``appended <LEO>`` and, whenever the recovery
point advanced (a flush completed: fsync + checkpoint), ``flushed <recovery point>``
to REPORT_PATH (plain os.write: the report survives SIGKILL via the page cache, and a
line is written only after what it reports has happened).
"""
from __future__ import annotations

import os
import random
import sys

from shm.batch import build_batch
from shm.log import Log

from crash_config import BROKER_ID, CONFIG, PARTITION, TOPIC


def main() -> None:
    data_dir, cluster_id, report_path, seed = sys.argv[1:5]
    rng = random.Random(int(seed))
    log = Log.open(data_dir, TOPIC, PARTITION, CONFIG, cluster_id=cluster_id,
                   broker_id=BROKER_ID)
    report = os.open(report_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(report, f"opened {log.log_end_offset}\n".encode())
    flushed = log.recovery_point
    while True:
        leo = log.log_end_offset
        count = rng.randint(1, 40)
        values = [str(leo + i).encode() * rng.randint(1, 8) for i in range(count)]
        log.append_as_leader(build_batch(values, timestamps_ms=leo), leader_epoch=1)
        os.write(report, f"appended {log.log_end_offset}\n".encode())
        if log.recovery_point > flushed:
            flushed = log.recovery_point
            os.write(report, f"flushed {flushed}\n".encode())


if __name__ == "__main__":
    main()
