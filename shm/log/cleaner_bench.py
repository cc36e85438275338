"""A storage benchmark hook for compaction: ``bench_clean(records, keys)`` cleans a log of
``records`` records over ``keys`` distinct keys and reports MB/s (Kafka's cleaner
figure: MB of log read per second). For ``bench`` (cbroker's) and for a quick look:

    python -m shm.log.cleaner_bench --records 1000000 --keys 10000
"""
from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
import uuid

import numpy as np

from shm import batch as codec
from shm.config import LogConfig
from shm.log import Log
from shm.names import cleanup_cluster

RECORDS_PER_BATCH = 1000


def bench_clean(records: int, keys: int, *, value_bytes: int = 100,
                segment_bytes: int = 64 * 1024 * 1024, directory: str | None = None,
                throttle=None) -> dict:
    """Write ``records`` records (keys k0..k{keys-1} round-robin, ``value_bytes`` values)
    to a fresh log, clean it once, return the figures (MB/s over build, and over
    build + swap)."""
    cluster_id = "bench" + uuid.uuid4().hex[:8]
    root = tempfile.mkdtemp(prefix="mk-clean-bench-", dir=directory)
    config = LogConfig(segment_bytes=segment_bytes, cleanup_policy="compact",
                       min_cleanable_dirty_ratio=0.0, retention_ms=-1)
    log = Log.open(root, "bench", 0, config, cluster_id=cluster_id)
    try:
        written = 0
        rng = np.random.default_rng(1)
        while written < records:
            n = min(RECORDS_PER_BATCH, records - written)
            key_list = [b"key-%d" % ((written + i) % keys) for i in range(n)]
            values = rng.integers(0, 256, (n, value_bytes), dtype=np.uint8)
            log.append_as_leader(codec.build_batch(values, keys=key_list, timestamps_ms=1), 1)
            written += n
        log.roll(now_ms=1)
        log.update_high_watermark(log.log_end_offset)
        size = log.size_bytes
        plan = log.cleanable(2)
        started = time.perf_counter()
        cleaned = plan.build(throttle, now_ms=2)
        built = time.perf_counter()
        assert log.swap_cleaned(cleaned)
        swapped = time.perf_counter()
        stats = cleaned.stats
        return {"records": records, "keys": keys, "value_bytes": value_bytes,
                "log_mb": round(size / 1e6, 2), "kept_records": stats.records_kept,
                "written_mb": round(stats.bytes_written / 1e6, 3),
                "build_s": round(built - started, 3), "swap_s": round(swapped - built, 4),
                "mb_per_s": round(stats.bytes_read / 1e6 / (built - started), 1),
                "mb_per_s_with_swap": round(stats.bytes_read / 1e6 / (swapped - started), 1)}
    finally:
        log.delete()
        shutil.rmtree(root, ignore_errors=True)
        cleanup_cluster(cluster_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(bench_clean(args.records, args.keys, value_bytes=args.value_bytes)))


if __name__ == "__main__":
    main()
