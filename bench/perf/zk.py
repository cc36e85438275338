"""zk_lite benchmark through kazoo, optionally side by side with a real ZooKeeper 3.8.

    python -m bench.perf.zk [--compare-zookeeper] [--ops N]

Prints one JSON line per server (stdout; progress goes to stderr):

    server, create_per_s, get_per_s, set_per_s, get_async_pipelined_per_s,
    watch_fire_ms_p50, watch_fire_ms_p99, ephemeral_gone_after_kill_s

(ephemeral_gone_after_kill_s: owners with a 4 s session SIGKILLed, time until a watcher
sees NodeDeleted; the median of three owners killed together.)

and with --compare-zookeeper a last line ``{"server": "ratio", ...}`` holding
zk_lite / ZooKeeper for every figure (throughputs: higher is better; latencies and the
expiry time: lower is better). Both servers run with the same durability (fsync before
the reply: zk_lite always, ZooKeeper with forceSync=yes) and the same tickTime.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from kazoo.client import KazooClient

from bench.perf.zkservers import ServerHandle, missing_reason, start

TICK_TIME_MS = 2000  # ZooKeeper's sample config; allows the 4 s session below
EPHEMERAL_SESSION_TIMEOUT_S = 4.0
CLIENT_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 30.0
WARMUP_OPS = 200
WATCH_SAMPLES_MAX = 500
PIPELINE_WINDOW = 1000  # outstanding async gets at most
EXPIRY_WAIT_MAX_S = 30.0
EXPIRY_SAMPLES = 3
FIGURES = ("create_per_s", "get_per_s", "set_per_s", "get_async_pipelined_per_s",
           "watch_fire_ms_p50", "watch_fire_ms_p99", "ephemeral_gone_after_kill_s")


def log(message: str) -> None:
    print(f"bench.perf.zk: {message}", file=sys.stderr, flush=True)


def per_second(ops: int, func) -> float:
    start = time.perf_counter()
    func()
    return ops / (time.perf_counter() - start)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def measure_crud(client: KazooClient, ops: int) -> dict:
    client.ensure_path("/bench/warm")
    for i in range(WARMUP_OPS):
        client.create(f"/bench/warm/{i}", b"w")
        client.get(f"/bench/warm/{i}")
        client.set(f"/bench/warm/{i}", b"x")
    value = b"v" * 100
    client.ensure_path("/bench/nodes")
    paths = [f"/bench/nodes/{i}" for i in range(ops)]
    figures = {
        "create_per_s": per_second(ops, lambda: [client.create(p, value) for p in paths]),
        "get_per_s": per_second(ops, lambda: [client.get(p) for p in paths]),
        "set_per_s": per_second(ops, lambda: [client.set(p, value) for p in paths]),
    }

    def pipelined_gets():
        for first in range(0, ops, PIPELINE_WINDOW):
            pending = [client.get_async(p) for p in paths[first:first + PIPELINE_WINDOW]]
            for result in pending:
                result.get(timeout=60)

    pipelined_gets()  # warm-up pass
    figures["get_async_pipelined_per_s"] = per_second(ops, pipelined_gets)
    return figures


def measure_watch_latency(watcher: KazooClient, writer: KazooClient, samples: int) -> dict:
    writer.ensure_path("/bench/watched")
    fired = threading.Event()
    latencies_ms = []
    for i in range(samples + WARMUP_OPS // 10):
        fired.clear()
        watcher.get("/bench/watched", watch=lambda event: fired.set())
        start = time.perf_counter()
        writer.set("/bench/watched", str(i).encode())
        if not fired.wait(30):
            raise RuntimeError("watch did not fire within 30 s")
        if i >= WARMUP_OPS // 10:
            latencies_ms.append((time.perf_counter() - start) * 1000)
    return {"watch_fire_ms_p50": percentile(latencies_ms, 0.50),
            "watch_fire_ms_p99": percentile(latencies_ms, 0.99)}


def run_ephemeral_owner(hosts: str, path: str) -> None:
    """Child process: own an ephemeral with a 4 s session, say so, wait to be killed."""
    client = KazooClient(hosts=hosts, timeout=EPHEMERAL_SESSION_TIMEOUT_S)
    client.start(timeout=CONNECT_TIMEOUT_S)
    client.create(path, ephemeral=True)
    print("ready", flush=True)
    sys.stdin.readline()


def measure_ephemeral_expiry(watcher: KazooClient, hosts: str) -> dict:
    """Median over EXPIRY_SAMPLES owners killed together (expiry is tick-aligned, so one
    sample alone mostly measures where in the tick the kill fell)."""
    paths = [f"/bench/owned-{n}" for n in range(EXPIRY_SAMPLES)]
    owners = [subprocess.Popen(
        [sys.executable, "-m", "bench.perf.zk", "--ephemeral-owner", hosts, path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
        for path in paths]
    try:
        for owner in owners:
            line = owner.stdout.readline()
            if line.strip() != "ready":
                raise RuntimeError(f"ephemeral owner failed: {line!r}")
        gone_at: dict[str, float] = {}
        all_gone = threading.Event()

        def watch(path):
            def on_event(event):
                gone_at[path] = time.perf_counter()
                if len(gone_at) == len(paths):
                    all_gone.set()
            return on_event

        for path in paths:
            if watcher.exists(path, watch=watch(path)) is None:
                raise RuntimeError(f"{path} missing before the kill")
        killed_at = time.perf_counter()
        for owner in owners:
            os.killpg(owner.pid, signal.SIGKILL)
        if not all_gone.wait(EXPIRY_WAIT_MAX_S):
            raise RuntimeError(f"ephemerals still there {EXPIRY_WAIT_MAX_S} s after their owners died")
        return {"ephemeral_gone_after_kill_s": statistics.median(t - killed_at for t in gone_at.values())}
    finally:
        for owner in owners:
            if owner.poll() is None:
                os.killpg(owner.pid, signal.SIGKILL)
            owner.wait()
            owner.stdin.close()
            owner.stdout.close()


def bench_server(kind: str, ops: int) -> dict:
    log(f"starting {kind}")
    handle: ServerHandle = start(kind, TICK_TIME_MS)
    clients = []
    try:
        for _ in range(2):
            client = KazooClient(hosts=handle.hosts, timeout=CLIENT_TIMEOUT_S)
            client.start(timeout=CONNECT_TIMEOUT_S)
            clients.append(client)
        main, other = clients
        log(f"{kind}: create/get/set x {ops}")
        figures = {"server": kind}
        figures.update(measure_crud(main, ops))
        log(f"{kind}: watch latency")
        figures.update(measure_watch_latency(other, main, min(ops, WATCH_SAMPLES_MAX)))
        log(f"{kind}: ephemeral expiry after SIGKILL of its owner")
        figures.update(measure_ephemeral_expiry(other, handle.hosts))
        return figures
    finally:
        for client in clients:
            try:
                client.stop()
            finally:
                client.close()
        handle.close()


def ratios(ours: dict, theirs: dict) -> dict:
    return {"server": "ratio", **{key: ours[key] / theirs[key] for key in FIGURES}}


def _rounded(figures: dict) -> dict:
    """Rates to 0.1/s, times and ratios to 3 decimals: what the noise allows."""
    return {key: (round(value, 1) if key.endswith("_per_s") and figures.get("server") != "ratio"
                  else round(value, 3)) if isinstance(value, float) else value
            for key, value in figures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.zk", description=__doc__.split("\n")[0])
    parser.add_argument("--compare-zookeeper", action="store_true",
                        help="also measure a real ZooKeeper 3.8 (Debian's zookeeper package)")
    parser.add_argument("--ops", type=int, default=5000, help="operations per figure (default 5000)")
    parser.add_argument("--ephemeral-owner", nargs=2, metavar=("HOSTS", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ephemeral_owner:
        run_ephemeral_owner(*args.ephemeral_owner)
        return 0
    if args.ops <= 0:
        parser.error("--ops must be positive")
    kinds = ["zk_lite"]
    if args.compare_zookeeper:
        reason = missing_reason("zookeeper")
        if reason:
            parser.error(f"--compare-zookeeper: {reason}")
        kinds.append("zookeeper")
    results = {}
    for kind in kinds:
        results[kind] = bench_server(kind, args.ops)
        print(json.dumps(_rounded(results[kind])), flush=True)
    if args.compare_zookeeper:
        print(json.dumps(_rounded(ratios(results["zk_lite"], results["zookeeper"]))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
