"""Test helpers for real broker processes: zk_lite, brokers, and a test-side controller.

Every process is started in its own process group (``start_new_session``) and killed by
``close()``; ``Cluster`` is used as a fixture so teardown always runs. A
``TestController`` plays Kafka's controller by hand: it writes the topic and
partition-state znodes and sends LeaderAndIsr / UpdateMetadata / StopReplica with a raw
``node.net.Channel`` and a controller epoch of its choosing.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from kazoo.client import KazooClient

from bench.perf import zkservers
from node.wire import protocol
from node.wire import zkdata
from node.config import write_properties
from node.net import Channel
from shm import batch as batch_codec
from shm.names import cleanup_cluster
from tests.waiting import poll_until

REPO_ROOT = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 30.0
PORT_RETRIES = 3      # a start whose port another process took meanwhile: a new port
STOP_TIMEOUT_S = 15.0
REQUEST_TIMEOUT_MS = 10_000
LOG_TAIL_LINES = 80  # of each broker's log, printed when a test failed


def wait_for(predicate, what: str, timeout_s: float = 20.0, interval_s: float = 0.02):
    """Poll ``predicate`` until it returns something truthy (returned) or time runs out."""
    return poll_until(predicate, timeout_s, what, interval_s=interval_s, error=TimeoutError)


class BrokerProcess:
    def __init__(self, broker_id: int, zk_hosts: str, base_dir: Path, cluster_id: str,
                 overrides: dict | None = None) -> None:
        self.broker_id = broker_id
        self.dir = base_dir / f"broker-{broker_id}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = zkservers.free_port()
        self.props = {
            "broker.id": broker_id,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.dir / "logs"),
            "zookeeper.connect": zk_hosts,
            "zookeeper.session.timeout.ms": 4000,
            "cluster.id": cluster_id,
            "controlled.shutdown.enable": "false",
            "replica.fetch.backoff.ms": 100,
        }
        self.props.update(overrides or {})
        self.config_path = self.dir / "server.properties"
        self.log_path = self.dir / "broker.log"
        self.process: subprocess.Popen | None = None
        self.killed = False   # SIGKILLed at some point: its shared memory may be left behind

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def start(self, zk: KazooClient | None = None) -> "BrokerProcess":
        """Start the process; with ``zk``, wait until it registered (a new session's
        /brokers/ids/N, not a previous incarnation's that has yet to expire)."""
        old = zk.exists(zkdata.broker_path(self.broker_id)) if zk is not None else None
        self._old_owner = old.ephemeralOwner if old is not None else None
        for attempt in range(PORT_RETRIES + 1):
            said = len(self.log())
            write_properties(str(self.config_path), self.props)
            log = open(self.log_path, "ab")
            env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
            self.process = subprocess.Popen(
                [sys.executable, "-m", "node.broker", "--config", str(self.config_path)],
                stdout=log, stderr=subprocess.STDOUT, cwd=str(REPO_ROOT), env=env,
                start_new_session=True)
            log.close()
            if zk is None:
                return self
            try:
                wait_for(lambda: self._registered(zk), f"broker {self.broker_id} registration",
                         START_TIMEOUT_S)
                return self
            except RuntimeError:
                # The port was picked free, then bound by the broker: another test can
                # take it in between, also on a restart (CI, once): a new port
                ours = self.props["listeners"] == f"PLAINTEXT://127.0.0.1:{self.port}"
                if attempt == PORT_RETRIES or not ours or \
                        "Address already in use" not in self.log()[said:]:
                    raise
                self.port = zkservers.free_port()
                self.props["listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
        raise AssertionError("unreachable")

    def _registered(self, zk: KazooClient) -> bool:
        if self.process.poll() is not None:
            raise RuntimeError(f"broker {self.broker_id} exited with {self.process.returncode}"
                               f":\n{self.log()}")
        stat = zk.exists(zkdata.broker_path(self.broker_id))
        return stat is not None and stat.ephemeralOwner not in (0, self._old_owner)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive:
            os.killpg(self.process.pid, sig)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code."""
        if self.process is None:
            return 0
        if self.alive:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.process.wait()

    def kill(self) -> None:
        if self.process is not None:
            self.killed = self.killed or self.alive
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()


class Cluster:
    """zk_lite + brokers + a test-side controller; ``close()`` kills everything.

    With ``test_controller`` (the default) this process holds ``/controller`` (as broker
    id ``controller_id``) for the whole test, so no broker's ControllerRunner wins the
    election and the test drives the brokers itself; without it the brokers elect a
    real controller among themselves."""

    def __init__(self, base_dir: Path, cluster_id: str, tick_time_ms: int = 200,
                 test_controller: bool = True) -> None:
        self.base_dir = base_dir
        self.cluster_id = cluster_id
        self.zk_server = zkservers.start("zk_lite", tick_time_ms=tick_time_ms)
        self.zk = KazooClient(hosts=self.zk_server.hosts, timeout=10)
        self.zk.start(timeout=10)
        self.brokers: dict[int, BrokerProcess] = {}
        self.channels: dict[int, Channel] = {}
        self.controller_epoch = 1
        self.controller_id = 100
        if test_controller:
            self.zk.create(zkdata.CONTROLLER_EPOCH,
                           zkdata.encode_controller_epoch(self.controller_epoch))
            self.zk.create(zkdata.CONTROLLER, zkdata.encode_controller(self.controller_id),
                           ephemeral=True)

    def add_broker(self, broker_id: int, start: bool = True, **overrides) -> BrokerProcess:
        props = {k.replace("_", "."): v for k, v in overrides.items()}
        broker = BrokerProcess(broker_id, self.zk_server.hosts, self.base_dir, self.cluster_id,
                               props)
        self.brokers[broker_id] = broker
        if start:
            broker.start(self.zk)
        return broker

    def channel(self, broker_id: int) -> Channel:
        channel = self.channels.get(broker_id)
        if channel is not None and channel.endpoint != self.brokers[broker_id].endpoint:
            channel.close()                   # restarted on another port
            del self.channels[broker_id]
        if broker_id not in self.channels:
            self.channels[broker_id] = Channel(self.brokers[broker_id].endpoint,
                                               client_id=f"test-{broker_id}")
        return self.channels[broker_id]

    def request(self, broker_id: int, api_key: int, body: dict, frames=(),
                timeout_ms: int = REQUEST_TIMEOUT_MS) -> protocol.Response:
        return self.channel(broker_id).request(api_key, body, frames, timeout_ms=timeout_ms)

    # ---- the test-side controller ----------------------------------------------------------

    def create_topic(self, topic: str, assignment: dict[int, list[int]]) -> None:
        """Write the znodes and make the first replica of each partition the leader."""
        self.zk.create(zkdata.topic_path(topic), zkdata.encode_assignment(assignment),
                       makepath=True)
        for partition, replicas in assignment.items():
            state = zkdata.PartitionState(replicas[0], 0, tuple(replicas), self.controller_epoch)
            self.zk.create(zkdata.partition_state_path(topic, partition),
                           zkdata.encode_partition_state(state), makepath=True)
        self.send_leader_and_isr(topic, list(assignment), is_new=True)
        self.send_update_metadata()

    def partition_state(self, topic: str, partition: int) -> zkdata.PartitionState:
        data, stat = self.zk.get(zkdata.partition_state_path(topic, partition))
        return zkdata.decode_partition_state(data, stat.version)

    def assignment(self, topic: str) -> dict[int, list[int]]:
        data, _ = self.zk.get(zkdata.topic_path(topic))
        return zkdata.decode_assignment(topic, data)

    def send_leader_and_isr(self, topic: str, partitions: list[int], is_new: bool = False,
                            to: list[int] | None = None, epoch: int | None = None) -> dict:
        assignment = self.assignment(topic)
        entries = []
        for p in partitions:
            state = self.partition_state(topic, p)
            entries.append([topic, p, state.leader, state.leader_epoch, list(state.isr),
                            state.zk_version, assignment[p], is_new])
        live = [[b.broker_id, "127.0.0.1", b.port] for b in self.brokers.values() if b.alive]
        body = {"controller_id": self.controller_id,
                "controller_epoch": self.controller_epoch if epoch is None else epoch,
                "partitions": entries, "live_leaders": live}
        targets = to if to is not None else sorted(
            {r for p in partitions for r in assignment[p]})
        out = {}
        for broker_id in targets:
            if self.brokers[broker_id].alive:
                out[broker_id] = self.request(broker_id, protocol.ApiKey.LEADER_AND_ISR, body).body
        return out

    def elect(self, topic: str, partition: int, leader: int, isr: list[int],
              to: list[int] | None = None) -> None:
        """Move leadership as a controller would: bump the epoch, write, tell replicas."""
        old = self.partition_state(topic, partition)
        state = zkdata.PartitionState(leader, old.leader_epoch + 1, tuple(isr),
                                      self.controller_epoch)
        self.zk.set(zkdata.partition_state_path(topic, partition),
                    zkdata.encode_partition_state(state), version=old.zk_version)
        self.send_leader_and_isr(topic, [partition], to=to)
        if to is None:
            self.send_update_metadata()

    def update_metadata_body(self, epoch: int | None = None) -> dict:
        partitions = []
        for topic in self.zk.get_children(zkdata.BROKER_TOPICS):
            assignment = self.assignment(topic)
            for p, replicas in sorted(assignment.items()):
                state = self.partition_state(topic, p)
                partitions.append([topic, p, state.leader, state.leader_epoch, list(state.isr),
                                   state.zk_version, replicas, []])
        brokers = [[b.broker_id, "127.0.0.1", b.port, None]
                   for b in self.brokers.values() if b.alive]
        return {"controller_id": self.controller_id,
                "controller_epoch": self.controller_epoch if epoch is None else epoch,
                "brokers": brokers, "partitions": partitions}

    def send_update_metadata(self, epoch: int | None = None) -> dict:
        body = self.update_metadata_body(epoch)
        return {b.broker_id: self.request(b.broker_id, protocol.ApiKey.UPDATE_METADATA, body).body
                for b in self.brokers.values() if b.alive}

    # ---- client-side helpers -----------------------------------------------------------------

    def produce(self, broker_id: int, topic: str, partition: int, values: list[bytes],
                acks: int = 1, timeout_ms: int = 10_000, request_timeout_ms: int | None = None
                ) -> list:
        batch = batch_codec.build_batch(values)
        body = {"acks": acks, "timeout_ms": timeout_ms, "partitions": [[topic, partition]]}
        if acks == 0:
            self.channel(broker_id).send(protocol.ApiKey.PRODUCE, body, [batch],
                                         expect_response=False)
            return []
        response = self.request(broker_id, protocol.ApiKey.PRODUCE, body, [batch],
                                timeout_ms=request_timeout_ms or timeout_ms + 5000)
        return response.body["partitions"][0]

    def fetch(self, broker_id: int, topic: str, partition: int, offset: int,
              max_wait_ms: int = 0, min_bytes: int = 1, replica_id: int = -1,
              leader_epoch: int = -1, timeout_ms: int = REQUEST_TIMEOUT_MS):
        """(partition entry, list of (offset, value)) of one Fetch."""
        body = {"replica_id": replica_id, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
                "max_bytes": 1 << 20,
                "partitions": [[topic, partition, offset, leader_epoch, 1 << 20]]}
        response = self.request(broker_id, protocol.ApiKey.FETCH, body, timeout_ms=timeout_ms)
        entry = response.body["partitions"][0]
        frame = response.frames[0] if response.frames else b""
        data = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
        records = []
        for batch in batch_codec.parse_batches(data):
            for offset_, _, _, value in batch.records():
                records.append((offset_, value))
        return entry, records

    def list_offset(self, broker_id: int, topic: str, partition: int, timestamp: int,
                    replica_id: int = -1) -> list:
        body = {"replica_id": replica_id, "partitions": [[topic, partition, timestamp]]}
        return self.request(broker_id, protocol.ApiKey.LIST_OFFSETS, body).body["partitions"][0]

    def print_logs(self, lines: int = LOG_TAIL_LINES) -> None:
        """Each broker's log tail, for a failed test's report."""
        for broker_id, broker in sorted(self.brokers.items()):
            tail = broker.log().splitlines()[-lines:]
            print(f"---- broker {broker_id}: the last {len(tail)} lines of its log ----")
            print("\n".join(tail))

    def close(self) -> None:
        """Stop every broker cleanly (SIGTERM; SIGKILL after a timeout), then zk_lite.
        Shared memory is cleaned up only for brokers that were SIGKILLed (a clean stop
        must leave nothing: the suite checks)."""
        for channel in self.channels.values():
            channel.close()
        self.channels.clear()
        try:
            for broker in self.brokers.values():
                broker.stop()
        finally:
            for broker in self.brokers.values():
                broker.kill()
            if any(b.killed for b in self.brokers.values()):
                cleanup_cluster(self.cluster_id)
        try:
            self.zk.stop()
            self.zk.close()
        finally:
            self.zk_server.close()
