"""Storage benchmark: ``python -m bench.perf.storage [--size-mb N] [--dir D]``.

Prints exactly one JSON line:

- ``append_mb_s``: 100-byte records in 1 MiB batches through ``Log.append_as_leader``
  (offsets stamped, offset and time index maintained, no fsync: Kafka's default);
  the median over 16 rounds.
- ``os_write_mb_s``: the same bytes written with plain ``os.write`` to one file in the
  same directory, in rounds interleaved with the appends (median over the rounds).
  This is the limit an append can approach.
- ``append_ratio``: ``append_mb_s / os_write_mb_s`` (target >= 0.8).
- ``read_mb_s``: ``Log.read`` over the whole log, in this process.
- ``local_read_mb_s``: ``LocalReader`` over the whole log from a second process, below
  the HW the benchmark publishes on the board (target >= 2000).
- ``recover_reattach_s`` / ``recover_rebuild_s``: reopening a ``--size-mb`` log after
  its process was SIGKILLed (it had flushed, so the recovery point is near the end, as
  on a running broker), in a fresh process, with the shared-memory index reattached vs
  with the shared-memory index and the index files gone, so every index is rebuilt
  from the segment files (target reattach <= 0.5 s for 1024 MiB).

What the read figures touch: every batch header is parsed (record counts summed and
checked against the offsets, so offsets are contiguous) and one byte of every 4 KiB
page of every batch is loaded, so every page is mapped into the reading process and
brought through the cache hierarchy once; payload bytes are not otherwise inspected
(pass ``--verify-crc`` to also check every batch's CRC-32C, which then dominates).

Batches are built once up front (a pool of distinct random batches, cycled); building
is not measured. Everything lives in a temporary directory under ``--dir`` (one
filesystem for the log and the ``os.write`` file) and under fresh cluster ids; files,
shared-memory objects and child processes are removed even when the run fails.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from node.paths import child_env
from shm.batch import HEADER_BYTES, LENGTH_OVERHEAD_BYTES, build_batch
from shm.names import cleanup_cluster

MIB = 1024 * 1024
RECORD_BYTES = 100
BATCH_BYTES_TARGET = MIB


def _records_per_batch() -> int:
    """Most records whose batch fits in 1 MiB: header, timestamp deltas, key and value
    offsets, payloads and the null-key bitmap (keys are null, as a producer's often are)."""
    n = (BATCH_BYTES_TARGET - HEADER_BYTES - 8) // (RECORD_BYTES + 12)
    while HEADER_BYTES + 8 + n * (RECORD_BYTES + 12) + (n + 7) // 8 > BATCH_BYTES_TARGET:
        n -= 1
    return n


RECORDS_PER_BATCH = _records_per_batch()
POOL_BATCHES_MAX = 16
READ_MAX_BYTES = 8 * MIB
WRITE_ROUNDS = 16
RECOVERY_ATTEMPTS_MAX = 3
PAGE_BYTES = 4096
CHILD_TIMEOUT_S = 600
TOPIC = "bench"
BROKER_ID = 0
_COUNT_AND_LENGTH = struct.Struct("<qi")   # base_offset, batch_length
_RECORD_COUNT = struct.Struct("<i")
_RECORD_COUNT_POSITION = 57


# ---------------------------------------------------------------- batches

def build_pool(batch_count: int) -> list[bytearray]:
    """Up to POOL_BATCHES_MAX distinct ~1 MiB batches of 100-byte random records."""
    rng = np.random.default_rng(0)
    now_ms = int(time.time() * 1000)
    pool = []
    for _ in range(min(batch_count, POOL_BATCHES_MAX)):
        values = rng.integers(0, 256, size=(RECORDS_PER_BATCH, RECORD_BYTES), dtype=np.uint8)
        pool.append(build_batch(values, None, now_ms))
    return pool


def batch_count_for(size_mb: int) -> int:
    return max(1, size_mb * MIB // BATCH_BYTES_TARGET)


def walk(view, verify_crc: bool = False) -> tuple[int, int, int]:
    """(records, bytes, next offset) of the whole batches in ``view``, touching each page.

    Checks that offsets are contiguous and that each batch's record count matches
    its offset span.
    """
    records = 0
    position = 0
    end = len(view)
    next_offset = None
    pages = np.frombuffer(view, np.uint8)[::PAGE_BYTES]
    touched = int(pages.sum(dtype=np.uint64))  # loads one byte of every page
    del pages
    while position < end:
        base_offset, batch_length = _COUNT_AND_LENGTH.unpack_from(view, position)
        (count,) = _RECORD_COUNT.unpack_from(view, position + _RECORD_COUNT_POSITION)
        if next_offset is not None and base_offset != next_offset:
            raise AssertionError(f"offsets jump from {next_offset} to {base_offset}")
        if verify_crc:
            from shm.batch import check_batch
            check_batch(view, position, verify_crc=True)
        records += count
        next_offset = base_offset + count
        position += batch_length + LENGTH_OVERHEAD_BYTES
    if position != end:
        raise AssertionError(f"batches end at {position}, the read returned {end} bytes")
    assert touched >= 0
    return records, end, next_offset


# ---------------------------------------------------------------- processes

# Children die with the benchmark even if it is SIGKILLed (Linux PR_SET_PDEATHSIG).
_CHILD_PREAMBLE = """
import ctypes, signal
try:
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))
except (OSError, AttributeError):
    pass
"""


def _spawn(code: str, *args: str) -> subprocess.Popen:
    env = child_env()
    return subprocess.Popen([sys.executable, "-c", _CHILD_PREAMBLE + code, *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _line(proc: subprocess.Popen, timeout_s: float = CHILD_TIMEOUT_S) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    line = proc.stdout.readline() if ready else ""
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise RuntimeError(f"benchmark child process failed: {err.strip()[-2000:]}")
    return line.strip()


class _Children:
    """Every child process of the run; all are killed and reaped on exit."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def spawn(self, code: str, *args: str) -> subprocess.Popen:
        proc = _spawn(code, *args)
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            try:
                proc.communicate(timeout=30)
            except (subprocess.TimeoutExpired, ValueError):
                pass


# ---------------------------------------------------------------- log adapter
# The only place that knows the Log API (shm.log).

def open_log(root: str, cluster_id: str, *, reattach_indexes: bool = True, **config):
    from shm.config import LogConfig
    from shm.log import Log
    return Log.open(root, TOPIC, 0, LogConfig(**config), cluster_id=cluster_id,
                    broker_id=BROKER_ID, reattach_indexes=reattach_indexes)


# ---------------------------------------------------------------- measurements

def _os_write_all(fd: int, view: memoryview) -> int:
    written = 0
    while view:
        n = os.write(fd, view)
        view = view[n:]
        written += n
    return written


def measure_writes(path: str, log, pool: list[bytearray], batch_count: int
                   ) -> tuple[int, float, int, float]:
    """(os.write bytes, MiB/s, append bytes, MiB/s) for the same batches.

    The two are interleaved in rounds, alternating which goes first, so both see the
    same machine (other processes' load, dirty-page writeback of earlier rounds)
    rather than one of them always writing into the other's dirty pages. Each figure
    is the median of its per-round throughputs: the kernel throttles page-cache
    writers in bursts once background writeback starts (vm.dirty_background_ratio),
    and a sum of times lets one burst that lands on one side decide the ratio.
    """
    rounds = max(1, min(WRITE_ROUNDS, batch_count))
    per_round = -(-batch_count // rounds)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    written = appended = 0
    os_write_rates, append_rates = [], []
    try:
        for r in range(rounds):
            batches = range(r * per_round, min(batch_count, (r + 1) * per_round))
            if not batches:
                break
            for step in ((0, 1) if r % 2 == 0 else (1, 0)):
                start = time.perf_counter()
                round_bytes = 0
                if step == 0:
                    for i in batches:
                        round_bytes += _os_write_all(fd, memoryview(pool[i % len(pool)]))
                    written += round_bytes
                    os_write_rates.append(round_bytes / MIB / (time.perf_counter() - start))
                else:
                    for i in batches:
                        batch = pool[i % len(pool)]
                        log.append_as_leader(batch, 0)
                        round_bytes += len(batch)
                    appended += round_bytes
                    append_rates.append(round_bytes / MIB / (time.perf_counter() - start))
    finally:
        os.close(fd)
    return written, statistics.median(os_write_rates), appended, statistics.median(append_rates)


def measure_read(log, end_offset: int) -> tuple[int, float]:
    offset = log.log_start_offset
    total = 0
    start = time.perf_counter()
    while offset < end_offset:
        view = log.read(offset, READ_MAX_BYTES)
        _, size, offset = walk(view)
        total += size
    return total, time.perf_counter() - start


LOCAL_READ_CHILD = """
import json, sys, time
from bench.perf.storage import walk
from shm.local_reader import LocalReader
cluster_id, log_dir, topic, end_offset = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with LocalReader(cluster_id, 0, log_dir, topic, 0) as reader:
    offset, total, records = 0, 0, 0
    start = time.perf_counter()
    while offset < end_offset:
        read = reader.read(offset, 8 * 1024 * 1024)
        for view in read.batches:
            n, size, _ = walk(view)
            records += n
            total += size
        offset = read.next_offset
    elapsed = time.perf_counter() - start
print(json.dumps({"bytes": total, "seconds": elapsed, "records": records}), flush=True)
"""

RECOVER_WRITER_CHILD = """
import sys, time
from bench.perf.storage import build_pool, open_log
size_mb, root_a, cid_a, root_b, cid_b = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
pool = build_pool(size_mb)
for root, cid in ((root_a, cid_a), (root_b, cid_b)):
    log = open_log(root, cid)
    for i in range(size_mb):
        log.append_as_leader(pool[i % len(pool)], 0)
    log.flush()  # a running broker's recovery point is near its end
print("ready", flush=True)
time.sleep(600)  # until SIGKILL
"""

REOPEN_CHILD = """
import json, sys, time
from bench.perf.storage import open_log
root, cid, reattach = sys.argv[1], sys.argv[2], sys.argv[3] == "reattach"
start = time.perf_counter()
log = open_log(root, cid, reattach_indexes=reattach)
elapsed = time.perf_counter() - start
end = log.log_end_offset
report = log.recovery
log.close()
print(json.dumps({"seconds": elapsed, "log_end_offset": end,
                  "reattached": report.indexes_reattached, "rebuilt": report.indexes_rebuilt,
                  "bytes_scanned": report.bytes_scanned}), flush=True)
"""


def measure_recovery(root: str, size_mb: int, children: _Children,
                     cluster_ids: list[str]) -> tuple[float, float]:
    """(reattach seconds, rebuild seconds), retried when the crash's shared memory was
    removed by someone else before the reopen: the measurement would then be a rebuild
    twice. (Any process may unlink another's /dev/shm objects; a concurrent pytest
    session's leak sweep does.)"""
    for attempt in range(RECOVERY_ATTEMPTS_MAX):
        reattached, rebuilt = _crash_and_reopen(os.path.join(root, f"crash{attempt}"), size_mb,
                                                children, cluster_ids)
        if reattached["log_end_offset"] != rebuilt["log_end_offset"]:
            raise AssertionError(f"recovered logs differ: {reattached} {rebuilt}")
        if reattached["reattached"] > 0:
            return reattached["seconds"], rebuilt["seconds"]
        print(f"bench.perf.storage: the crashed log's shared memory vanished before the reopen"
              f" (attempt {attempt + 1}); crashing again", file=sys.stderr)
    raise RuntimeError(f"no reattach in {RECOVERY_ATTEMPTS_MAX} attempts: {reattached}")


def _crash_and_reopen(root: str, size_mb: int, children: _Children, cluster_ids: list[str]):
    cid_a, cid_b = (f"bench{uuid.uuid4().hex[:10]}" for _ in range(2))
    cluster_ids += [cid_a, cid_b]
    root_a, root_b = os.path.join(root, "reattach"), os.path.join(root, "rebuild")
    writer = children.spawn(RECOVER_WRITER_CHILD, str(size_mb), root_a, cid_a, root_b, cid_b)
    if _line(writer) != "ready":
        raise RuntimeError("recovery writer did not get ready")
    writer.send_signal(signal.SIGKILL)
    writer.wait(30)
    # Two logs left in the same state by the same crash: one reopened reattaching the
    # shared-memory indexes it left behind, the other rebuilding every index.
    results = []
    for r, cid, how in ((root_a, cid_a, "reattach"), (root_b, cid_b, "rebuild")):
        results.append(json.loads(_line(children.spawn(REOPEN_CHILD, r, cid, how))))
    for r in (root_a, root_b):
        shutil.rmtree(r, ignore_errors=True)
    for cid in (cid_a, cid_b):
        cleanup_cluster(cid)
    return results


def run(size_mb: int, base_dir: str | None, verify_crc: bool = False) -> dict:
    batch_count = batch_count_for(size_mb)
    pool = build_pool(batch_count)
    root = tempfile.mkdtemp(prefix="mk-bench-storage-", dir=base_dir)
    children = _Children()
    cluster_id = f"bench{uuid.uuid4().hex[:10]}"
    cluster_ids = [cluster_id]
    log = board = None
    try:
        log = open_log(root, cluster_id)
        os_write_path = os.path.join(root, "os-write.bin")
        written, os_write_mb_s, appended, append_mb_s = measure_writes(
            os_write_path, log, pool, batch_count)
        os.unlink(os_write_path)
        assert appended == written, (appended, written)
        end_offset = log.log_end_offset
        assert end_offset == batch_count * RECORDS_PER_BATCH, end_offset

        read_bytes, read_s = measure_read(log, end_offset)
        assert read_bytes == appended, (read_bytes, appended)

        from shm.board import ReplicaStateBoard, Role
        board = ReplicaStateBoard.create(cluster_id, BROKER_ID, capacity=1)
        board.publish(TOPIC, 0, role=Role.LEADER, leader_epoch=0, leader_id=BROKER_ID,
                      log_end_offset=end_offset, high_watermark=end_offset,
                      log_start_offset=log.log_start_offset, isr=(BROKER_ID,))
        reader = children.spawn(LOCAL_READ_CHILD, cluster_id, root, TOPIC, str(end_offset))
        local = json.loads(_line(reader))
        assert local["bytes"] == appended and local["records"] == end_offset, local
        board.close()
        board = None
        log.close()
        log = None

        reattach_s, rebuild_s = measure_recovery(root, size_mb, children, cluster_ids)
        return {
            "append_mb_s": round(append_mb_s, 1),
            "os_write_mb_s": round(os_write_mb_s, 1),
            "append_ratio": round(append_mb_s / os_write_mb_s, 3),
            "read_mb_s": round(read_bytes / MIB / read_s, 1),
            "local_read_mb_s": round(local["bytes"] / MIB / local["seconds"], 1),
            "recover_reattach_s": round(reattach_s, 4),
            "recover_rebuild_s": round(rebuild_s, 4),
        }
    finally:
        children.close()
        for closable in (board, log):
            if closable is not None:
                try:
                    closable.close()
                except Exception:
                    pass
        for cid in cluster_ids:
            cleanup_cluster(cid)
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.storage", description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024, help="log size in MiB (default 1024)")
    parser.add_argument("--dir", default=None, help="parent of the temporary directory")
    parser.add_argument("--verify-crc", action="store_true", help="check CRCs while reading")
    args = parser.parse_args(argv)
    if args.size_mb < 1:
        parser.error("--size-mb must be at least 1")
    # SIGTERM (a CI timeout, Ctrl-C from a supervisor) still runs the cleanup.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    print(json.dumps(run(args.size_mb, args.dir, args.verify_crc)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
