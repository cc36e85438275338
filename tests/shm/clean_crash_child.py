"""Child of the compaction crash test: build a fixed compacted log, clean it, and die
(os._exit, as a SIGKILL: no cleanup) at the HIT-th pass through the crash point POINT,
or run to the end and print the passes of every point as JSON.

Usage: clean_crash_child.py DATA_DIR CLUSTER_ID POINT HIT
"""
from __future__ import annotations

import json
import os
import sys

from shm import faults
from shm.batch import build_batch
from shm.control import build_marker
from shm.config import LogConfig
from shm.log import Log

CRASH_STATUS = 86
TOPIC, PARTITION, BROKER_ID = "cc", 0, 3
# Small segments grouped two or three per cleaned segment, several groups per clean.
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=200, cleanup_policy="compact",
                   min_cleanable_dirty_ratio=0.0, retention_ms=-1)
NOW_MS = 5_000


def open_log(data_dir: str, cluster_id: str) -> Log:
    return Log.open(data_dir, TOPIC, PARTITION, CONFIG, cluster_id=cluster_id,
                    broker_id=BROKER_ID)


def fill(log: Log) -> None:
    """The same log every time: keys reused, a few tombstones, some batches wholly
    superseded and some split; transactions of three producers, aborted and committed,
    one left open (so the clean stops at the LSO)."""
    sequences = {}
    for i in range(160):
        keys = [b"k%d" % ((i * 3 + j) % 11) for j in range(3)]
        values = [None if (i + j) % 13 == 0 else b"v%d-%d" % (i, j) for j in range(3)]
        log.append_as_leader(build_batch(values, keys=keys, timestamps_ms=1000 + i), 1)
        pid = 1 + (i // 8) % 3
        if i >= 96 and i % 8 in (0, 2):
            seq = sequences.get(pid, 0)
            sequences[pid] = seq + 2
            log.append_as_leader(build_batch(
                [b"t%d" % i, b"u%d" % i], keys=[b"k%d" % (i % 11), b"t%d" % (i % 5)],
                timestamps_ms=1000 + i, producer_id=pid, producer_epoch=0, base_sequence=seq,
                transactional=True), 1)
        if i >= 96 and i % 8 == 4 and i < 150:
            log.append_as_leader(build_marker(pid, 0, (i // 8) % 2 == 1, 0, 1000 + i), 1)
    log.update_high_watermark(log.log_end_offset)
    log.flush()


def main() -> None:
    data_dir, cluster_id, point, hit = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    log = open_log(data_dir, cluster_id)
    fill(log)
    counts: dict[str, int] = {}

    def hook(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1
        if name == point and counts[name] == hit:
            os._exit(CRASH_STATUS)

    cleaned = log.cleanable(NOW_MS).build(now_ms=NOW_MS)
    faults.hook = hook
    assert log.swap_cleaned(cleaned)
    faults.hook = None
    print(json.dumps(counts), flush=True)
    os._exit(0)  # leave the log as a crash would


if __name__ == "__main__":
    main()
