"""Single-record request latency of a real 3-broker cluster, through a raw Channel.

    python -m bench.perf.latency [--runs 5] [--requests 1000] [--rate 1000] [--warmup 200]

Starts zk_lite and three broker processes (they elect a real controller among
themselves), creates ``rf1`` (1 partition, replication factor 1) and ``rf3`` (1
partition, replication factor 3, ``min.insync.replicas=2``), then, talking to each
partition's leader with a ``node.net.RequestChannel`` (no client library, so only the brokers
are measured), times one request at a time at ``--rate`` requests/s (open loop: a
request is sent at its slot, or at once when the previous answer came late):

    metadata          Metadata for one topic (the round trip plus the loop's dispatch)
    rf1_acks1         Produce of one 100-byte record, RF=1, acks=1
    rf3_acks1         the same on the RF=3 partition, acks=1 (followers fetch meanwhile)
    rf3_acks_all      the same with acks=all: answered once both followers fetched it

Each scenario runs ``--runs`` times (interleaved, so a noisy neighbour hurts all of
them alike); p50/p99/max are computed per run, and the median of each over the runs is
printed as one JSON line (milliseconds)::

    {"metadata": {"p50": .., "p99": .., "max": ..}, "rf1_acks1": {...}, ...,
     "runs": 5, "requests": 1000, "rate": 1000}

With ``--breakdown`` it follows acks=all writes on ``rf3`` instead: each request
carries ``"trace": [send ns]`` and the brokers stamp it on the way (leader receive,
append, each follower's fetch answered, follower receive and append, its next fetch
sent and received, HW advance, answer; ``time.monotonic_ns``, CLOCK_MONOTONIC, is one
clock for every process of a host). It prints the median and p99 of every hop in
microseconds, along the follower whose fetch advanced the HW (the critical path),
and the same as one JSON line. With ``--floor`` as well, this machine's floor is measured
first, in the same run (``bench.perf.limits``: paced round trips at ``--rate`` of a Unix
socket, as the local links, and of POSIX semaphores), printed under the table and added
to the JSON line as ``floor_us``: a hop between two processes cannot take less than
half a round trip.

The breakdown also says where the followers ran: after each traced write it reads the
CPU each follower last ran on (``/proc/PID/stat``) and groups the writes by whether the
two ran on different CPUs or on the same one, with each group's share and p50s
(``placement`` in the JSON line). On a 2-core machine that placement, which the kernel
decides, moves the later follower's wake-up by ~100 µs: two followers on one CPU take
turns (README, "Where the second follower's wake-up goes").

Everything is stopped and the cluster's shared memory removed on exit.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.perf import zkservers
from node.perf import results
from node.perf.results import HOPS, TOTAL_HOP
from node.tools.common import ToolError
from node.waiting import poll_until
from node.wire import protocol
from node.config import write_properties
from node import local_link
from node.net import RequestChannel
from node.paths import child_env
from shm.batch import build_batch
from shm.names import cleanup_cluster
from bench.perf import overrides as override

BROKERS = 3
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
REQUEST_TIMEOUT_MS = 10_000
RECORD_BYTES = 100
SCENARIOS = ("metadata", "rf1_acks1", "rf3_acks1", "rf3_acks_all")


def wait_for(predicate, what: str, timeout_s: float = START_TIMEOUT_S):
    return poll_until(predicate, timeout_s, what, interval_s=0.05)


class LatencyCluster:
    """zk_lite + ``BROKERS`` broker processes in a temp dir; ``close()`` kills all."""

    def __init__(self, broker_overrides: dict | None = None) -> None:
        self.cluster_id = "lat" + uuid.uuid4().hex[:12]
        self.dir = Path(tempfile.mkdtemp(prefix="mk-latency-"))
        self.zk = None
        self.processes: list[subprocess.Popen] = []
        self.ports: dict[int, int] = {}
        self.overrides = broker_overrides or {}
        self.channels: dict[int, RequestChannel] = {}

    def start(self) -> "LatencyCluster":
        self.zk = zkservers.start("zk_lite", tick_time_ms=500)
        env = child_env()
        for broker_id in range(BROKERS):
            port = zkservers.free_port()
            self.ports[broker_id] = port
            broker_dir = self.dir / f"broker-{broker_id}"
            broker_dir.mkdir()
            props = {"broker.id": broker_id,
                     "listeners": f"PLAINTEXT://127.0.0.1:{port}",
                     "log.dirs": str(broker_dir / "logs"),
                     "zookeeper.connect": self.zk.hosts,
                     "cluster.id": self.cluster_id,
                     "controlled.shutdown.enable": "false"}
            props.update(self.overrides)
            write_properties(str(broker_dir / "server.properties"), props)
            with open(broker_dir / "broker.log", "ab") as log:
                self.processes.append(subprocess.Popen(
                    [sys.executable, "-m", "node.broker", "--config",
                     str(broker_dir / "server.properties")],
                    stdout=log, stderr=subprocess.STDOUT, cwd=broker_dir, env=env,
                    start_new_session=True))
        wait_for(lambda: len(self.metadata(0).body["brokers"]) == BROKERS,
                 "the controller's UpdateMetadata naming every broker")
        # Channels opened while a broker was starting fell back to ZeroMQ: reopen them
        # now that every broker's local link is up.
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()
        return self

    def channel(self, broker_id: int) -> RequestChannel:
        if broker_id not in self.channels:
            self.channels[broker_id] = local_link.open_channel(
                f"tcp://127.0.0.1:{self.ports[broker_id]}", client_id="bench-latency")
        return self.channels[broker_id]

    def request(self, broker_id: int, api_key: int, body: dict, frames=()) -> protocol.Response:
        return self.channel(broker_id).request(api_key, body, frames,
                                               timeout_ms=REQUEST_TIMEOUT_MS)

    def metadata(self, broker_id: int, topics=None) -> protocol.Response:
        self._check_alive()
        return self.request(broker_id, protocol.ApiKey.METADATA, {"topics": topics})

    def create_topic(self, name: str, replication_factor: int, configs: dict) -> int:
        """Create a one-partition topic; wait until every replica is in sync; its leader."""
        response = self.request(0, protocol.ApiKey.CREATE_TOPICS, {
            "topics": [[name, 1, replication_factor, None, configs]],
            "timeout_ms": REQUEST_TIMEOUT_MS, "validate_only": False})
        error = response.body["topics"][0][1]
        if error:
            raise RuntimeError(f"CreateTopics {name}: {response.body}")

        def ready():
            topics = self.metadata(0, [name]).body["topics"]
            if not topics or topics[0][1] or not topics[0][2]:
                return None
            _, error, leader, _, replicas, isr, _ = topics[0][2][0]
            if error or leader < 0 or len(isr) != replication_factor:
                return None
            # The leader itself must be serving it (LeaderAndIsr applied).
            probe = self.request(leader, protocol.ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "partitions": [[name, 0, protocol.LATEST_TIMESTAMP]]})
            return (leader,) if probe.body["partitions"][0][2] == 0 else None
        return wait_for(ready, f"topic {name} online with its full ISR")[0]

    def _check_alive(self) -> None:
        for broker_id, process in enumerate(self.processes):
            if process.poll() is not None:
                log = (self.dir / f"broker-{broker_id}" / "broker.log").read_text(
                    errors="replace")
                raise RuntimeError(f"broker {broker_id} exited with {process.returncode}:\n"
                                   f"{log[-4000:]}")

    def close(self) -> None:
        for channel in self.channels.values():
            channel.close()
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if self.zk is not None:
            self.zk.close()
        cleanup_cluster(self.cluster_id)
        shutil.rmtree(self.dir, ignore_errors=True)


def time_requests(channel: RequestChannel, api_key: int, body: dict, frames_fn, count: int,
                  rate: int, warmup: int) -> list[float]:
    """Latencies in ms of ``count`` sequential requests paced at ``rate``/s."""
    interval_s = 1.0 / rate
    samples = []
    next_send = time.perf_counter()
    for i in range(warmup + count):
        delay = next_send - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        frames = frames_fn()
        start = time.perf_counter()
        response = channel.request(api_key, body, frames, timeout_ms=REQUEST_TIMEOUT_MS)
        elapsed_ms = (time.perf_counter() - start) * 1000
        _check_response(api_key, response)
        if i >= warmup:
            samples.append(elapsed_ms)
        next_send = max(next_send + interval_s, time.perf_counter())
    return samples


def _check_response(api_key: int, response: protocol.Response) -> None:
    if api_key == protocol.ApiKey.PRODUCE:
        error = response.body["partitions"][0][2]
        if error:
            raise RuntimeError(f"produce failed: {response.body}")


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "max": ordered[-1]}


def run(runs: int, count: int, rate: int, warmup: int,
        broker_overrides: dict | None = None, samples: list | None = None) -> dict:
    """The figures; with ``samples``, every timed request is appended to it as
    (scenario, round, latency ms)."""
    cluster = LatencyCluster(broker_overrides).start()
    try:
        leaders = {"rf1": cluster.create_topic("rf1", 1, {}),
                   "rf3": cluster.create_topic("rf3", 3, {"min.insync.replicas": "2"})}
        record = b"x" * RECORD_BYTES

        def batch():
            return (bytearray(build_batch([record])),)

        def produce(topic: str, acks: int):
            return (leaders[topic], protocol.ApiKey.PRODUCE,
                    {"acks": acks, "timeout_ms": REQUEST_TIMEOUT_MS,
                     "partitions": [[topic, 0]]}, batch)

        plans = {"metadata": (0, protocol.ApiKey.METADATA, {"topics": ["rf3"]}, tuple),
                 "rf1_acks1": produce("rf1", 1),
                 "rf3_acks1": produce("rf3", 1),
                 "rf3_acks_all": produce("rf3", -1)}
        per_run: dict[str, list[dict]] = {name: [] for name in SCENARIOS}
        for round_ in range(runs):
            for name in SCENARIOS:
                broker_id, api_key, body, frames_fn = plans[name]
                timed = time_requests(cluster.channel(broker_id), api_key, body, frames_fn,
                                      count, rate, warmup)
                per_run[name].append(percentiles(timed))
                if samples is not None:
                    samples.extend((name, round_, ms) for ms in timed)
        result = {name: {stat: round(statistics.median(r[stat] for r in per_run[name]), 3)
                         for stat in ("p50", "p99", "max")} for name in SCENARIOS}
        result.update(runs=runs, requests=count, rate=rate)
        return result
    finally:
        cluster.close()


FOLLOWER_STAMPS = ("f_answered", "f_received", "f_appended", "f_sent", "f_leader")


PROC_STAT_BYTES_MAX = 1024
PROCESSOR_FIELD = 39       # proc(5): the CPU the task last ran on


class LastCpus:
    """The CPU each broker process last ran on, read from its ``/proc/PID/stat``
    (opened once; one pread a read)."""

    def __init__(self, pids: dict[int, int]) -> None:
        self.fds = {broker: os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
                    for broker, pid in pids.items()}

    def read(self) -> dict[int, int]:
        out = {}
        for broker, fd in self.fds.items():
            stat = os.pread(fd, PROC_STAT_BYTES_MAX, 0)
            # fields after "(comm)" start with field 3, the state
            out[broker] = int(stat[stat.rfind(b")") + 2:].split()[PROCESSOR_FIELD - 3])
        return out

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}

    def __enter__(self) -> "LastCpus":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def traced_requests(cluster: LatencyCluster, leader: int, topic: str, count: int,
                    rate: int, warmup: int) -> tuple[list[dict], int]:
    """Stamps (ns) of ``count`` traced acks=all writes along the follower whose fetch
    advanced the HW, each with ``follower_cpus`` (how many different CPUs the followers
    last ran on, read after the answer); and how many answers could not be followed
    that far."""
    with LastCpus({b: p.pid for b, p in enumerate(cluster.processes) if b != leader}) as cpus:
        channel = cluster.channel(leader)
        record = b"x" * RECORD_BYTES
        interval_s = 1.0 / rate
        paths, incomplete = [], 0
        next_send = time.perf_counter()
        for i in range(warmup + count):
            delay = next_send - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            frames = (bytearray(build_batch([record])),)
            body = {"acks": -1, "timeout_ms": REQUEST_TIMEOUT_MS, "partitions": [[topic, 0]],
                    "trace": [time.monotonic_ns()]}
            response = channel.request(protocol.ApiKey.PRODUCE, body, frames,
                                        timeout_ms=REQUEST_TIMEOUT_MS)
            received = time.monotonic_ns()
            _check_response(protocol.ApiKey.PRODUCE, response)
            next_send = max(next_send + interval_s, time.perf_counter())
            if i < warmup:
                continue
            trace = response.body.get("trace") or {}
            follower = (trace.get("followers") or {}).get(str(trace.get("by")))
            if follower is None or len(follower) != len(FOLLOWER_STAMPS):
                incomplete += 1
                continue
            path = {key: trace[key] for key in ("send", "receive", "append", "high_watermark",
                                                 "answer")}
            path.update(zip(FOLLOWER_STAMPS, follower))
            path["client_receive"] = received
            path["follower_cpus"] = len(set(cpus.read().values()))
            paths.append(path)
        return paths, incomplete


def breakdown_table(paths: list[dict]) -> dict[str, dict[str, float]]:
    """Median and p99 (µs) of every hop and of the whole write."""
    table = {}
    for name, start, end in (*HOPS, TOTAL_HOP):
        samples = sorted((p[end] - p[start]) / 1000 for p in paths)
        table[name] = {"p50": round(samples[len(samples) // 2], 1),
                       "p99": round(samples[min(len(samples) - 1,
                                                int(len(samples) * 0.99))], 1)}
    return table


def placement_table(paths: list[dict]) -> dict[str, dict]:
    """The writes grouped by how many different CPUs the followers last ran on: each
    group's count, share, and p50 (µs) of the whole write and of the critical follower's
    wake-up."""
    out = {}
    for distinct in sorted({p["follower_cpus"] for p in paths}, reverse=True):
        group = [p for p in paths if p["follower_cpus"] == distinct]
        out[str(distinct)] = {
            "writes": len(group), "share": round(len(group) / len(paths), 3),
            "total_p50": round(statistics.median(
                (p["client_receive"] - p["send"]) / 1000 for p in group), 1),
            "follower_wake_p50": round(statistics.median(
                (p["f_received"] - p["f_answered"]) / 1000 for p in group), 1)}
    return out


def run_breakdown(count: int, rate: int, warmup: int,
                  broker_overrides: dict | None = None, samples: list | None = None) -> dict:
    """The table; with ``samples``, every traced write's stamps are appended to it."""
    cluster = LatencyCluster(broker_overrides).start()
    try:
        leader = cluster.create_topic("rf3", 3, {"min.insync.replicas": "2"})
        paths, incomplete = traced_requests(cluster, leader, "rf3", count, rate, warmup)
        if not paths:
            raise RuntimeError(f"none of {count} traced writes came back with its path")
        if samples is not None:
            samples.extend(paths)
        return {"breakdown_us": breakdown_table(paths), "traced": len(paths),
                "incomplete": incomplete, "requests": count, "rate": rate,
                "placement": placement_table(paths)}
    finally:
        cluster.close()


FLOOR_ROUNDS = 3
FLOOR_TRIPS = 300
FANOUT_WORK_US = 50          # what each woken process of the fan-out floor works (a copy)


def measure_floor(rate: int) -> dict[str, float]:
    """Medians over FLOOR_ROUNDS of paced round trips (µs) of a Unix socket carrying a
    record-sized message and of two semaphores (one-way hops are half of each), and of
    the wake-up of the later of two processes rung at once (``limits.fanout_round``:
    the floor of a follower's wake-up, as the leader rings both)."""
    from bench.perf import limits
    unix = statistics.median(statistics.median(limits.unix_round(FLOOR_TRIPS, rate,
                                                                 RECORD_BYTES))
                             for _ in range(FLOOR_ROUNDS))
    semaphore = statistics.median(statistics.median(limits.semaphore_round(FLOOR_TRIPS, rate))
                                  for _ in range(FLOOR_ROUNDS))
    fanout = statistics.median(statistics.median(limits.fanout_round(FLOOR_TRIPS, rate,
                                                                     FANOUT_WORK_US))
                               for _ in range(FLOOR_ROUNDS))
    return {"unix_round_trip": round(unix, 1), "unix_hop": round(unix / 2, 1),
            "semaphore_round_trip": round(semaphore, 1), "semaphore_hop": round(semaphore / 2, 1),
            "fanout_wake": round(fanout, 1)}


def print_breakdown(result: dict) -> None:
    table = result["breakdown_us"]
    width = max(len(name) for name in table)
    print(f"acks=all, RF=3, min.insync.replicas=2, {RECORD_BYTES}-byte records, "
          f"{result['rate']} writes/s: {result['traced']} traced "
          f"({result['incomplete']} incomplete), along the follower that advanced the HW")
    print(f"{'hop':<{width}}  {'p50 us':>9}  {'p99 us':>9}")
    for name, stats in table.items():
        if name == "total":
            print("-" * (width + 22))
        print(f"{name:<{width}}  {stats['p50']:>9.1f}  {stats['p99']:>9.1f}")
    for distinct, group in result.get("placement", {}).items():
        where = "on one CPU" if distinct == "1" else f"on {distinct} different CPUs"
        print(f"{group['writes']} writes ({group['share']:.0%}) with the followers {where} "
              f"(each one's last CPU after the write): total p50 {group['total_p50']:.1f} us, "
              f"follower wake-up p50 {group['follower_wake_p50']:.1f} us")
    floor = result.get("floor_us")
    if floor:
        print(f"floor, same run ({result['rate']}/s paced round trips): one-way hop over a Unix "
              f"socket {floor['unix_hop']:.1f} us (round trip {floor['unix_round_trip']:.1f}), "
              f"over semaphores {floor['semaphore_hop']:.1f} us "
              f"(round trip {floor['semaphore_round_trip']:.1f})")
        if "fanout_wake" in floor:
            print(f"floor of a follower's wake-up, same run: two processes rung at once "
                  f"through pipes, the later woke after {floor['fanout_wake']:.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.perf.latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000, help="timed requests per run")
    parser.add_argument("--rate", type=int, default=1000, help="requests per second")
    parser.add_argument("--warmup", type=int, default=200, help="untimed requests first")
    override.add_argument(parser)
    parser.add_argument("--breakdown", action="store_true",
                        help="follow traced acks=all writes hop by hop instead")
    parser.add_argument("--floor", action="store_true",
                        help="with --breakdown: measure this machine's floor first, same run")
    parser.add_argument("--results", default=None, metavar="DIR",
                        help="record the run in the results store DIR (node.perf.results)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.requests < 1 or args.rate < 1 or args.warmup < 0:
        parser.error("--runs, --requests and --rate must be positive")
    overrides = override.parse(parser, args.override)
    recording = None
    if args.results:
        try:
            recording = results.Run.start(args.results, "bench.perf.latency", args, argv)
        except ToolError as e:
            parser.exit(2, f"{parser.prog}: {e}\n")
    samples: list | None = [] if recording is not None else None
    if args.floor and not args.breakdown:
        parser.error("--floor goes with --breakdown")
    if args.breakdown:
        floor = measure_floor(args.rate) if args.floor else None   # before any broker runs
        result = run_breakdown(args.requests, args.rate, args.warmup, overrides, samples)
        if floor is not None:
            result["floor_us"] = floor
        print_breakdown(result)
    else:
        result = run(args.runs, args.requests, args.rate, args.warmup, overrides, samples)
    print(json.dumps(result), flush=True)
    if recording is not None:
        import pyarrow as pa
        if args.breakdown:
            stamps = ("send", "receive", "append", *FOLLOWER_STAMPS, "high_watermark",
                      "answer", "client_receive")
            table = pa.table({"write": pa.array(range(len(samples)), type=pa.int64()),
                              **{k: pa.array([p[k] for p in samples], type=pa.int64())
                                 for k in stamps}})
        else:
            table = pa.table({
                "scenario": pa.array([s[0] for s in samples], type=pa.string()),
                "round": pa.array([s[1] for s in samples], type=pa.int32()),
                "latency_ms": pa.array([s[2] for s in samples], type=pa.float64())})
        recording.add_samples("breakdown" if args.breakdown else "request", table)
        where = recording.finish(summary=result, cluster={"brokers": BROKERS},
                                 topic={"record_bytes": RECORD_BYTES})
        print(f"recorded in {where}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
