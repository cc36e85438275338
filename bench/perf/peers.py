"""minikafka beside the peers a user would pick instead, in one sitting.

    python -m bench.perf.peers [--records 2000] [--rate 1000] [--warmup 300]
                          [--throughput-records 100000] [--peers minikafka,redis,nats]
                          [--runs 1]

Each system runs three replicas on this host, and the same two workloads with
100-byte records, every write acknowledged only once two replicas have it:

- ``single``: one write at a time at ``--rate`` writes/s (open loop, as
  ``bench.perf.latency``): its p50 and p99 in ms;
- ``throughput``: ``--throughput-records`` writes as fast as the system's own client
  pipelines them: records/s and MB/s.

The systems:

- minikafka: zk_lite + 3 brokers, a topic with one partition, RF=3,
  ``min.insync.replicas=2``, acks=all; through ``Producer`` (``send().get()``; for
  throughput ``send`` and ``flush``) and, for ``single``, through a raw channel too;
- Redis Streams (``redis-server``: a primary and 2 replicas, no persistence, as
  minikafka does not fsync either): ``XADD`` + ``WAIT 2`` in one pipeline per write;
  for throughput, pipelines of ``PIPELINE_RECORDS`` XADDs ended by one ``WAIT 2``;
- NATS JetStream (``nats-server``: a 3-node cluster, a file stream with 3 replicas):
  ``js.publish`` waits for the stream's acknowledgement (a quorum of 2 has it); for
  throughput, ``PUBLISH_WINDOW`` publishes in flight.

A peer whose server or Python client (the ``peers`` extra: ``pip install -e
'.[peers]'``) is missing is skipped with one line saying so. It prints one table with
the ratio of each figure to minikafka's ``Producer``, then the same as a JSON line.

``--runs N`` starts every system afresh N times, the systems taking turns (each run
starts one further), and the figures are the medians over the runs (the table adds
the runs' min-max of each single-write p50; the JSON line keeps every run under
``per_run``). One run is a lottery on this project's 2-core VM: where the kernel places
minikafka's three broker loops is decided early in a cluster's life and moves its p50
by ~50 µs from one cluster to the next (README, "Where the second follower's wake-up
goes").
Every process it starts is stopped, and its files removed, on exit.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.perf import zkservers
from bench.perf.latency import RECORD_BYTES, LatencyCluster, percentiles, time_requests
from node.waiting import poll_until
from node.wire import protocol
from shm.batch import build_batch
from bench.perf import overrides as override

PEERS = ("minikafka", "redis", "nats")
START_TIMEOUT_S = 30.0
PIPELINE_RECORDS = 1000
RUNS_MAX = 100
PUBLISH_WINDOW = 1000
RECORD = b"x" * RECORD_BYTES


class Skipped(Exception):
    """A peer that cannot run here (its server or client is missing)."""


def paced(count: int, rate: int, warmup: int, write) -> list[float]:
    """Latencies (ms) of ``count`` calls of ``write()`` at ``rate``/s after ``warmup``."""
    interval_s, samples = 1.0 / rate, []
    next_send = time.perf_counter()
    for i in range(warmup + count):
        delay = next_send - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        start = time.perf_counter()
        write()
        if i >= warmup:
            samples.append((time.perf_counter() - start) * 1000)
        next_send = max(next_send + interval_s, time.perf_counter())
    return samples


def _throughput(records: int, seconds: float) -> dict:
    return {"records_per_s": round(records / seconds),
            "mb_per_s": round(records * RECORD_BYTES / seconds / 1e6, 2)}


def _latency(samples: list[float]) -> dict:
    return {k: round(v, 3) for k, v in percentiles(samples).items()}


# ------------------------------------------------------------------ minikafka

def run_minikafka(args) -> dict:
    from node.client import Producer
    cluster = LatencyCluster(args.overrides).start()
    try:
        leader = cluster.create_topic("rf3", 3, {"min.insync.replicas": "2"})
        bootstrap = ",".join(f"127.0.0.1:{port}" for port in cluster.ports.values())
        out = {}
        producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0)
        try:
            out["single"] = _latency(paced(
                args.records, args.rate, args.warmup,
                lambda: producer.send("rf3", RECORD, partition=0).get(timeout=10)))
        finally:
            producer.close()
        raw = time_requests(cluster.channel(leader), protocol.ApiKey.PRODUCE,
                            {"acks": -1, "timeout_ms": 10_000, "partitions": [["rf3", 0]]},
                            lambda: (bytearray(build_batch([RECORD])),),
                            args.records, args.rate, args.warmup)
        out["single_raw"] = _latency(raw)
        producer = Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
        try:
            producer.send("rf3", RECORD, partition=0).get(timeout=10)
            start = time.perf_counter()
            for _ in range(args.throughput_records):
                producer.send("rf3", RECORD, partition=0)
            producer.flush(timeout=120)
            out["throughput"] = _throughput(args.throughput_records,
                                            time.perf_counter() - start)
        finally:
            producer.close()
        return out
    finally:
        cluster.close()


# ------------------------------------------------------------------ Redis

class _Servers:
    """Server processes in a temp dir, killed and removed by ``close``."""

    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.processes: list[subprocess.Popen] = []

    def start(self, argv: list[str], name: str) -> None:
        log = open(self.dir / f"{name}.log", "ab")
        self.processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                               cwd=self.dir, start_new_session=True))
        log.close()

    def check(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                logs = "".join(p.read_text(errors="replace")[-800:]
                               for p in self.dir.glob("*.log"))
                raise RuntimeError(f"{process.args[0]} exited with {process.returncode}:\n"
                                   f"{logs}")

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def run_redis(args) -> dict:
    server = shutil.which("redis-server")
    if server is None:
        raise Skipped("redis-server is not installed (apt-get install redis-server)")
    try:
        import redis
    except ImportError:
        raise Skipped("its Python client is missing: pip install -e '.[peers]'") from None
    servers = _Servers("mk-peers-redis-")
    ports = [zkservers.free_port() for _ in range(3)]
    try:
        for i, port in enumerate(ports):
            argv = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", str(servers.dir)]
            if i:
                argv += ["--replicaof", "127.0.0.1", str(ports[0])]
            servers.start(argv, f"redis-{i}")
        primary = redis.Redis(host="127.0.0.1", port=ports[0])

        def replicas_online():
            servers.check()
            try:
                info = primary.info("replication")
            except redis.ConnectionError:
                return False
            return info.get("connected_slaves") == 2 and all(
                info.get(f"slave{i}", {}).get("state") == "online" for i in range(2))
        poll_until(replicas_online, START_TIMEOUT_S, "2 Redis replicas online",
                   interval_s=0.05)

        def write():
            pipe = primary.pipeline(transaction=False)
            pipe.xadd("bench", {"v": RECORD})
            pipe.wait(2, 10_000)
            acked = pipe.execute()[1]
            assert acked >= 2, f"WAIT 2 answered {acked}"
        out = {"single": _latency(paced(args.records, args.rate, args.warmup, write))}
        start = time.perf_counter()
        left = args.throughput_records
        while left:
            n = min(left, PIPELINE_RECORDS)
            pipe = primary.pipeline(transaction=False)
            for _ in range(n):
                pipe.xadd("bench", {"v": RECORD})
            pipe.wait(2, 10_000)
            assert pipe.execute()[-1] >= 2
            left -= n
        out["throughput"] = _throughput(args.throughput_records, time.perf_counter() - start)
        primary.close()
        return out
    finally:
        servers.close()


# ------------------------------------------------------------------ NATS

def run_nats(args) -> dict:
    server = shutil.which("nats-server")
    if server is None:
        raise Skipped("nats-server is not installed (apt-get install nats-server)")
    try:
        import nats
    except ImportError:
        raise Skipped("its Python client is missing: pip install -e '.[peers]'") from None
    servers = _Servers("mk-peers-nats-")
    ports = [zkservers.free_port() for _ in range(3)]
    routes = [zkservers.free_port() for _ in range(3)]
    try:
        for i in range(3):
            others = ",".join(f"nats://127.0.0.1:{routes[j]}" for j in range(3) if j != i)
            servers.start([server, "-js", "-sd", str(servers.dir / f"n{i}"), "-a",
                           "127.0.0.1", "-p", str(ports[i]), "-n", f"n{i}",
                           "--cluster_name", "mkbench", "--cluster",
                           f"nats://127.0.0.1:{routes[i]}", "--routes", others], f"nats-{i}")
        def listening():
            servers.check()
            return all(_accepts(port) for port in ports)
        poll_until(listening, START_TIMEOUT_S, "3 nats-servers listening", interval_s=0.05)
        return asyncio.run(_nats_workloads(nats, servers, ports, args))
    finally:
        servers.close()


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


async def _nats_workloads(nats, servers: _Servers, ports: list[int], args) -> dict:
    async def quiet(_error) -> None:
        pass   # the client retries on its own; a failure surfaces from the calls

    nc = await nats.connect(servers=[f"nats://127.0.0.1:{p}" for p in ports],
                            connect_timeout=5, max_reconnect_attempts=5, error_cb=quiet)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:   # until the JetStream meta group has a leader
            servers.check()
            try:
                await js.add_stream(name="BENCH", subjects=["bench"], num_replicas=3)
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        await js.publish("bench", RECORD)
        interval_s, samples = 1.0 / args.rate, []
        next_send = time.perf_counter()
        for i in range(args.warmup + args.records):
            delay = next_send - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            start = time.perf_counter()
            await js.publish("bench", RECORD)
            if i >= args.warmup:
                samples.append((time.perf_counter() - start) * 1000)
            next_send = max(next_send + interval_s, time.perf_counter())
        out = {"single": _latency(samples)}
        start = time.perf_counter()
        left = args.throughput_records
        while left:
            n = min(left, PUBLISH_WINDOW)
            await asyncio.gather(*(js.publish("bench", RECORD) for _ in range(n)))
            left -= n
        out["throughput"] = _throughput(args.throughput_records, time.perf_counter() - start)
        return out
    finally:
        await nc.close()


RUNNERS = {"minikafka": run_minikafka, "redis": run_redis, "nats": run_nats}
COLUMNS = (("minikafka", "single", "minikafka Producer"),
           ("minikafka", "single_raw", "minikafka raw"),
           ("redis", "single", "Redis WAIT 2"),
           ("nats", "single", "NATS R3"))


def median_results(runs: list[dict]) -> dict:
    """One system's figures over runs (each ``{workload: {stat: value}}``): the median of
    each stat over the runs that have it."""
    out: dict = {}
    for workload in dict.fromkeys(w for run in runs for w in run):
        stats = dict.fromkeys(s for run in runs for s in run.get(workload, {}))
        out[workload] = {}
        for stat in stats:
            values = [run[workload][stat] for run in runs if stat in run.get(workload, {})]
            median = statistics.median(values)
            out[workload][stat] = round(median, 3) if isinstance(median, float) else median
    return out


def spread(per_run: dict) -> list[str]:
    """Each single-write p50's min-max over the runs (when there are several)."""
    lines = []
    for peer, single_key, label in COLUMNS:
        values = [run[single_key]["p50"] for run in per_run.get(peer, [])
                  if single_key in run]
        if len(values) > 1:
            lines.append(f"{label}: single p50 over {len(values)} runs "
                         f"{min(values)}-{max(values)} ms")
    return lines


def table(results: dict) -> list[str]:
    base = results.get("minikafka", {})
    lines = []
    header = f"{'figure':<22}" + "".join(f"{label:>20}" for _, _, label in COLUMNS)
    lines.append(header)
    rows = [("single p50 ms", "single", "p50"), ("single p99 ms", "single", "p99"),
            ("throughput records/s", "throughput", "records_per_s"),
            ("throughput MB/s", "throughput", "mb_per_s")]
    for name, workload, stat in rows:
        line = f"{name:<22}"
        for peer, single_key, _ in COLUMNS:
            if workload != "single" and single_key != "single":
                value = None    # the raw channel only times single writes
            else:
                key = single_key if workload == "single" else workload
                value = results.get(peer, {}).get(key, {}).get(stat)
            if value is None:
                line += f"{'-':>20}"
                continue
            reference = base.get(workload, {}).get(stat)
            ratio = f" ({value / reference:.2f}x)" if reference else ""
            line += f"{str(value) + ratio:>20}"
        lines.append(line)
    lines.append("(x: the figure over minikafka Producer's; for latency below 1 is faster "
                 "than minikafka)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2000, help="timed single writes")
    parser.add_argument("--rate", type=int, default=1000, help="single writes per second")
    parser.add_argument("--warmup", type=int, default=300, help="untimed writes first")
    parser.add_argument("--throughput-records", type=int, default=100_000)
    parser.add_argument("--peers", default=",".join(PEERS),
                        help=f"comma-separated, of {', '.join(PEERS)}")
    parser.add_argument("--runs", type=int, default=1,
                        help="fresh starts of every system, taking turns; medians reported")
    override.add_argument(parser, "a minikafka broker property")
    args = parser.parse_args(argv)
    args.overrides = override.parse(parser, args.override)
    chosen = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in RUNNERS]
    if unknown or not chosen:
        parser.error(f"--peers: unknown {', '.join(unknown) or '(none given)'}; "
                     f"choose from {', '.join(PEERS)}")
    if min(args.records, args.rate, args.throughput_records) < 1 or args.warmup < 0:
        parser.error("--records, --rate and --throughput-records must be positive")
    if not 1 <= args.runs <= RUNS_MAX:
        parser.error(f"--runs must be in [1, {RUNS_MAX}], got {args.runs}")
    per_run: dict[str, list[dict]] = {}
    skipped: dict[str, str] = {}
    for run in range(args.runs):
        for peer in chosen[run % len(chosen):] + chosen[:run % len(chosen)]:
            if peer in skipped:
                continue
            suffix = f" (run {run + 1} of {args.runs})" if args.runs > 1 else ""
            print(f"{peer}: running{suffix} ...", file=sys.stderr, flush=True)
            try:
                per_run.setdefault(peer, []).append(RUNNERS[peer](args))
            except Skipped as e:
                skipped[peer] = str(e)
                print(f"{peer}: skipped: {e}", flush=True)
    results = {peer: median_results(runs) for peer, runs in per_run.items()}
    for line in table(results) + spread(per_run):
        print(line)
    line = {"results": results, "skipped": skipped, "records": args.records,
            "rate": args.rate, "record_bytes": RECORD_BYTES,
            "throughput_records": args.throughput_records, "runs": args.runs}
    if args.runs > 1:
        line["per_run"] = per_run
    print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
