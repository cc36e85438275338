"""``./scripts/demo``: the parts of the replication story that exist today, told live.

Act 1, the coordinator. zk_lite starts; three broker processes register the ephemeral
``/brokers/ids/N`` znodes through kazoo and race for the ephemeral ``/controller``, as
Kafka brokers do, bumping ``/controller_epoch`` with a conditional update. The
controller is SIGKILLed: its znodes live on until its session times out, then
``/controller`` moves to a survivor and the epoch goes up (that epoch is what fences a
zombie controller).

Act 2, the storage. A leader process appends record batches to a segmented log, moves
its high watermark and publishes it on the shared-memory replica-state board; this
process reads below the HW straight from the segment files (LocalReader), never asking
the writer. The writer is SIGKILLed mid-stream; the log is reopened with its
shared-memory indexes reattached, and recovery says what it scanned. Then one byte of
the last batch is flipped, as a torn sector would, and recovery cuts the log there and
says so.

The brokers' replication (ISR, HW across replicas, leader election for partitions)
arrives with the broker issue; this demo then grows into the full story.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

SESSION_TIMEOUT_S = 2.0
TICK_TIME_MS = 500
WAIT_S_MAX = 30.0
TOPIC = "demo"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def wait_for(predicate, what: str, timeout_s: float = WAIT_S_MAX, interval_s: float = 0.05):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"timed out after {timeout_s:.0f} s waiting for {what}")


# --------------------------------------------------------------------- child roles

def run_broker_registration(zk_hosts: str, broker_id: int) -> int:
    """A broker's coordinator duties only: register, and contend for /controller."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError

    zk = KazooClient(hosts=zk_hosts, timeout=SESSION_TIMEOUT_S)
    zk.start(timeout=10)
    zk.create(f"/brokers/ids/{broker_id}", ephemeral=True, makepath=True, value=json.dumps(
        {"version": 5, "host": "127.0.0.1", "port": 9092 + broker_id,
         "timestamp": str(int(time.time() * 1000))}).encode())
    elected, stopping = threading.Event(), threading.Event()

    def try_elect(_event=None) -> None:
        try:
            elect()
        except KazooException:
            if not stopping.is_set():  # losing the session while stopping is expected
                raise

    def elect() -> None:
        if elected.is_set() or stopping.is_set():
            return  # a broker on its way down does not take over the controller
        try:
            zk.create("/controller", ephemeral=True, value=json.dumps(
                {"version": 1, "brokerid": broker_id,
                 "timestamp": str(int(time.time() * 1000))}).encode())
        except NodeExistsError:
            if zk.exists("/controller", watch=try_elect) is None:
                try_elect()
            return
        while True:  # conditional update, as the Kafka controller does
            zk.ensure_path("/controller_epoch")
            data, stat = zk.get("/controller_epoch")
            epoch = int(data or b"0") + 1
            try:
                zk.set("/controller_epoch", str(epoch).encode(), version=stat.version)
                break
            except BadVersionError:
                continue
        elected.set()
        print(f"broker {broker_id}: I am the controller (controller_epoch {epoch})", flush=True)

    try_elect()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    stopping.set()
    zk.stop()
    zk.close()
    return 0


def run_log_writer(data_dir: str, cluster_id: str, batches_max: int) -> int:
    """A single-replica leader: append, advance HW, publish it on the board."""
    from shm.batch import build_batch
    from shm.board import ReplicaStateBoard, Role
    from shm.config import LogConfig
    from shm.log import Log

    # Kafka's default flush policy: no fsync per append; a roll fsyncs the sealed segment
    # and moves the recovery point, so after a crash only the active segment is rescanned.
    config = LogConfig(segment_bytes=1024 * 1024)
    log = Log.open(data_dir, TOPIC, 0, config, cluster_id=cluster_id, broker_id=0)
    board = ReplicaStateBoard.create(cluster_id, 0, capacity=4)
    values = [b"v" * 90 for _ in range(100)]
    for n in range(batches_max):
        info = log.append_as_leader(build_batch(values), leader_epoch=1)
        log.update_high_watermark(info.last_offset + 1)  # acks=1, one replica: HW = LEO
        log.flush_if_due()
        board.publish(TOPIC, 0, role=Role.LEADER, leader_epoch=1, leader_id=0,
                      log_end_offset=log.log_end_offset, high_watermark=log.high_watermark,
                      log_start_offset=log.log_start_offset, isr=(0,))
        time.sleep(0.002)  # a steady stream the reader can watch, not a benchmark
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    return 0


# --------------------------------------------------------------------- the story

def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "node.demo", *args],
                            stdout=sys.stdout, stderr=sys.stderr)


def start_zk_lite(data_dir: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "zk_lite", "--port", "0", "--data-dir",
                             data_dir, "--tick-time", str(TICK_TIME_MS)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"zk_lite did not start: {line!r}")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    return proc, line.rsplit(" ", 1)[-1].strip()


def act_coordinator(run_dir: str, procs: list[subprocess.Popen]) -> None:
    from kazoo.client import KazooClient

    say("ACT 1 - the coordinator")
    zk_proc, hosts = start_zk_lite(os.path.join(run_dir, "zk"))
    procs.append(zk_proc)
    say(f"zk_lite (ZooKeeper wire protocol) is up at {hosts}; starting brokers 0, 1, 2")
    brokers = {i: _spawn("broker-registration", hosts, str(i)) for i in range(3)}
    procs.extend(brokers.values())
    zk = KazooClient(hosts=hosts, timeout=10)
    zk.start(timeout=10)
    try:
        wait_for(lambda: all(_alive(b) for b in brokers.values()) and zk.exists(
            "/controller") and len(
            zk.get_children("/brokers/ids")) == 3, "three brokers and a controller")
        controller = json.loads(zk.get("/controller")[0])["brokerid"]
        say(f"/brokers/ids = {sorted(zk.get_children('/brokers/ids'))}, "
            f"/controller = broker {controller}, /controller_epoch = "
            f"{zk.get('/controller_epoch')[0].decode()}")
        say(f"SIGKILL broker {controller}. Its session stays alive until it times out "
            f"({SESSION_TIMEOUT_S:.0f} s): until then /controller still names it.")
        killed_at = time.monotonic()
        brokers[controller].kill()
        brokers[controller].wait()
        def new_controller():
            data = zk.exists("/controller") and zk.get("/controller")[0]
            broker = json.loads(data)["brokerid"] if data else controller
            return (broker,) if broker != controller else None

        (moved,) = wait_for(new_controller, "a new controller")
        say(f"after {time.monotonic() - killed_at:.1f} s: /controller = broker {moved}, "
            f"/controller_epoch = {zk.get('/controller_epoch')[0].decode()}, "
            f"/brokers/ids = {sorted(zk.get_children('/brokers/ids'))}")
        say("the higher controller epoch is what lets brokers refuse a zombie controller")
    finally:
        zk.stop()
        zk.close()


def act_storage(run_dir: str, cluster_id: str, procs: list[subprocess.Popen]) -> None:
    from shm.batch import parse_batch
    from shm.local_reader import LocalReader
    from shm.log import Log

    say("ACT 2 - the log")
    data_dir = os.path.join(run_dir, "broker-0")
    writer = _spawn("log-writer", data_dir, cluster_id, "5000")
    procs.append(writer)
    reader = wait_for(lambda: _alive(writer) and _try_local_reader(
        LocalReader, cluster_id, data_dir), "the writer's first batch")
    offset = records = 0
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        got = reader.read(offset, 1 << 20)
        for view in got.batches:
            records += parse_batch(view).header.record_count
        offset = got.next_offset
        time.sleep(0.1)
    say(f"a leader process is appending; this process read {records} records below "
        f"HW {got.high_watermark} straight from the segment files (LocalReader)")
    say("SIGKILL the leader mid-stream")
    writer.kill()
    writer.wait()
    reader.close()
    torn = _flip_last_batch(data_dir)
    log = Log.open(data_dir, TOPIC, 0, cluster_id=cluster_id, broker_id=0)
    r = log.recovery
    say(f"reopened: recovery point {r.recovery_point}; scanned {r.bytes_scanned} bytes in "
        f"{r.batches_scanned} batches from there; {r.indexes_reattached} shared-memory "
        f"index(es) reattached, {r.indexes_rebuilt} rebuilt; {r.elapsed_s * 1000:.1f} ms")
    for cut in r.truncations:
        say(f"recovery cut {cut.bytes} bytes of {os.path.basename(cut.file)} from offset "
            f"{cut.offset} ({cut.reason})")
    if torn is not None and not r.truncations:
        say("the flipped batch was below the recovery point (already fsync'd), so recovery "
            "did not rescan it; a consumer's CRC check is what catches that case")
    say(f"log end offset {log.log_end_offset}: every batch below it is whole and checked")
    log.close()


def _flip_last_batch(data_dir: str) -> int | None:
    """Flip one byte in the body of the newest batch, as a torn sector would."""
    from shm.batch import HEADER_BYTES, LENGTH_OVERHEAD_BYTES, PREFIX

    directory = os.path.join(data_dir, f"{TOPIC}-0")
    newest = max(f for f in os.listdir(directory) if f.endswith(".log"))
    path = os.path.join(directory, newest)
    with open(path, "r+b") as f:
        data = f.read()
        position = last = 0
        while position + LENGTH_OVERHEAD_BYTES <= len(data):
            length = PREFIX.unpack_from(data, position)[1]
            if length <= 0:
                break
            last, position = position, position + length + LENGTH_OVERHEAD_BYTES
        if position == 0:
            say("the active segment is empty: nothing to tear")
            return None
        at = last + HEADER_BYTES + 4
        f.seek(at)
        f.write(bytes([data[at] ^ 0xFF]))
    say(f"flip one byte of the newest batch in {newest} (as a torn sector would), "
        f"then reopen the log")
    return at


def _alive(proc: subprocess.Popen) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"child process {proc.args[3]} exited with {proc.returncode}")
    return True


def _try_local_reader(cls, cluster_id: str, data_dir: str):
    try:
        reader = cls(cluster_id, 0, data_dir, TOPIC, 0)
        return reader if reader.read(0, 1).batches else None
    except Exception:  # the writer has not published yet
        return None


def story(run_dir: str | None = None) -> int:
    import logging

    from shm.names import cleanup_cluster

    logging.getLogger("shm").setLevel(logging.ERROR)  # the story prints what recovery cut
    run_dir = os.path.abspath(run_dir or os.path.join("runs", time.strftime("demo-%Y%m%d-%H%M%S")))
    os.makedirs(run_dir, exist_ok=True)
    cluster_id = "demo" + uuid.uuid4().hex[:8]
    procs: list[subprocess.Popen] = []
    say(f"minikafka demo; files under {run_dir}")
    try:
        act_coordinator(run_dir, procs)
        act_storage(run_dir, cluster_id, procs)
    finally:
        for proc in reversed(procs):  # brokers before the coordinator they talk to
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        cleanup_cluster(cluster_id)
    say("done: every process stopped, shared memory removed")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="minikafka demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-dir", help="where the demo keeps its files "
                        "(default: runs/demo-<time> under the current directory)")
    sub = parser.add_subparsers(dest="role")
    reg = sub.add_parser("broker-registration", help=argparse.SUPPRESS)
    reg.add_argument("zk_hosts")
    reg.add_argument("broker_id", type=int)
    writer = sub.add_parser("log-writer", help=argparse.SUPPRESS)
    writer.add_argument("data_dir")
    writer.add_argument("cluster_id")
    writer.add_argument("batches_max", type=int)
    args = parser.parse_args(argv)
    if args.role == "broker-registration":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        return run_broker_registration(args.zk_hosts, args.broker_id)
    if args.role == "log-writer":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        return run_log_writer(args.data_dir, args.cluster_id, args.batches_max)
    return story(args.run_dir)


if __name__ == "__main__":
    sys.exit(main())
