"""The cluster supervisor: start, inspect, kill, restart and stop a local cluster.

One directory ``D`` holds everything of one cluster (``layout``: cluster.json, each
broker's server.properties, pid and log files). With ``--netns`` (root only) every process
runs in its own network namespace with its own address, joined to the others by a full
mesh of veth links that faults can cut (``namespaces``, ``node.cluster.netns``); ``down``
removes the namespaces.

Every process runs in its own session and outlives the ``minikafka cluster up`` command
that started it; its pid file names it beyond doubt (``process``, with its states).

``down`` stops the brokers first (SIGCONT, then SIGTERM so they shut down in a
controlled way; SIGKILL after a grace period; the controller last), then zk_lite, and
removes the cluster's shared memory (``shm.names.cleanup_cluster``). The data stays in D: ``up`` on the same directory
starts the same cluster again.

The Python API (``Cluster``) is what tests use; the CLI (``minikafka cluster ...``) is a
thin layer over it that turns ``ClusterError`` into a one-line message.

``Cluster`` is this module (construction, start-up and readiness, stop, start, down,
growing and shrinking) with its parts as mixins, each opening with its rules:
``layout.Layout`` (the directory and the processes), ``namespaces.Namespaces`` (the
netns glue), ``faults.Faults`` (kill, power cut, move the controller, cut and heal) and
``inspection.Inspection`` (status and the coordinator's view); ``process.Process`` is one
supervised process.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal as signals
import time
from pathlib import Path

from node.cluster.faults import SIGNALS, Faults
from node.cluster.inspection import METADATA_TIMEOUT_MS, Inspection
from node.cluster.layout import (BROKERS_MAX, CLUSTER_FILE, HOST, NETNS_FILE,
                                 ZK_CONNECT_TIMEOUT_S, ZK_TICK_TIME_MS, Layout, _free_port,
                                 _reachable, _write_spec, new_cluster_id,
                                 parse_config_pairs)
from node.cluster.namespaces import Namespaces
from node.cluster.process import (KILL_WAIT_S, POLL_INTERVAL_S, STOP_GRACE_S, ClusterError,
                                  Process, ProcessStatus, _proc_stat)
from node.waiting import poll_until
from shm.names import check_cluster_id, cleanup_cluster

READY_TIMEOUT_S = 90.0
# A broker whose port was taken between picking it and binding it starts again with
# new ports at most this many times.
PORT_RETRIES = 3
START_MARK = "supervisor starts:"       # node.cluster.process's line before each start
ZK_LISTENING = "zk_lite listening on"   # zk_lite's line once it has bound its port
ZK_LOG_TAIL_BYTES = 20_000              # where wait_zk_ready looks for that line


def _port_was_taken(log_tail: str) -> bool:
    """Whether the broker's last start (its log after the supervisor's last start line)
    failed to bind a port that was in use."""
    # ZeroMQ says "Address already in use", asyncio (zk_lite) "address already in use"
    return "address already in use" in log_tail.rpartition(START_MARK)[2].lower()

log = logging.getLogger("minikafka.cluster")

# What this module offered before its parts moved out; importers may keep using it.
__all__ = ["Cluster", "ClusterError", "Process", "ProcessStatus", "new_cluster_id",
           "parse_config_pairs", "BROKERS_MAX", "CLUSTER_FILE", "HOST", "NETNS_FILE",
           "READY_TIMEOUT_S", "STOP_GRACE_S", "KILL_WAIT_S", "POLL_INTERVAL_S",
           "ZK_TICK_TIME_MS", "ZK_CONNECT_TIMEOUT_S", "METADATA_TIMEOUT_MS", "SIGNALS",
           "_proc_stat"]


class Cluster(Layout, Namespaces, Faults, Inspection):
    """A supervised cluster in one directory (see the module docstring).

    ``Cluster.up(dir, brokers=3, ...)`` creates and starts one and waits until it is
    ready; ``Cluster.open(dir)`` attaches to an existing one. Usable as a context
    manager: leaving the block calls ``down()``.
    """

    def __init__(self, directory: Path, spec: dict):
        # Absolute: the configs and command lines name files in it, and the processes
        # run in it, not in the directory the user gave it from (node.paths).
        self.dir = Path(os.path.abspath(directory))
        self.spec = spec
        self.cluster_id: str = spec["cluster_id"]
        self.zookeeper: str = spec["zookeeper"]
        self.external_zookeeper: bool = spec["external_zookeeper"]
        self.broker_ports: dict[int, int] = {int(b): p for b, p in spec["brokers"].items()}
        # Each broker's Kafka-protocol listener (absent in clusters made before it was).
        self.kafka_ports: dict[int, int] = {int(b): p for b, p in
                                            spec.get("kafka_brokers", {}).items()}
        self.netns: bool = bool(spec.get("netns"))
        self.mesh = self._load_mesh()
        self.processes: dict[str, Process] = {}
        self._build_processes()
        self._zk = None

    # ------------------------------------------------------------- construction
    @classmethod
    def up(cls, directory, brokers: int = 3, *, config: dict | None = None,
           cluster_id: str | None = None, zookeeper: str | None = None,
           broker_config: dict[int, dict] | None = None, wait: bool = True,
           ready_timeout_s: float = READY_TIMEOUT_S, netns: bool = False) -> "Cluster":
        """Create (or restart, if ``directory`` already holds a stopped cluster) and
        start a cluster; waits until every broker is registered, a controller is
        elected and every broker's Metadata answer names all brokers."""
        directory = Path(directory)
        if (directory / CLUSTER_FILE).exists():
            cluster = cls.open(directory)
            running = [p.name for p in cluster.processes.values() if p.pid() is not None]
            if running:
                raise ClusterError(f"{directory} already holds a running cluster "
                                   f"({', '.join(running)}); use 'cluster start' or 'down'")
            cluster._give_kafka_listeners()
        else:
            cluster = cls._create(directory, brokers, config or {}, cluster_id, zookeeper,
                                  broker_config or {}, netns)
        try:
            if cluster.netns:
                cluster._build_mesh()
            cluster._start_all(ready_timeout_s if wait else None)
        except BaseException:
            cluster.down()
            raise
        return cluster

    @classmethod
    def _create(cls, directory: Path, brokers: int, config: dict, cluster_id: str | None,
                zookeeper: str | None, broker_config: dict, netns: bool = False) -> "Cluster":
        if netns:
            from node.cluster.netns import NetnsError, require_root
            try:
                require_root()
            except NetnsError as e:
                raise ClusterError(str(e)) from None
            if zookeeper is not None:
                raise ClusterError("--netns runs its own zk_lite in a namespace; "
                                   "it cannot be combined with --zookeeper")
            asked = {config.get("replica.transport")} | \
                {c.get("replica.transport") for c in broker_config.values()}
            if "shm" in asked:
                raise ClusterError("replica.transport=shm does not go with --netns (the "
                                   "namespaces share /dev/shm: a cut link would not cut "
                                   "replication); --netns clusters replicate by Fetch")
        if not 0 <= brokers <= BROKERS_MAX:
            raise ClusterError(f"--brokers must be 0..{BROKERS_MAX}, got {brokers}")
        cluster_id = cluster_id or new_cluster_id()
        try:
            check_cluster_id(cluster_id)
        except ValueError as e:
            raise ClusterError(str(e)) from None
        if zookeeper is not None and not _reachable(zookeeper, ZK_CONNECT_TIMEOUT_S):
            raise ClusterError(f"cannot reach ZooKeeper at {zookeeper}")
        directory.mkdir(parents=True, exist_ok=True)
        ports = {i: _free_port() for i in range(brokers)}
        kafka_ports = {i: _free_port() for i in range(brokers)}
        spec = {
            "cluster_id": cluster_id,
            "zookeeper": zookeeper or f"{HOST}:{_free_port()}",
            "external_zookeeper": zookeeper is not None,
            "netns": bool(netns),
            "zk_tick_time_ms": ZK_TICK_TIME_MS,
            "brokers": {str(i): p for i, p in ports.items()},
            "kafka_brokers": {str(i): p for i, p in kafka_ports.items()},
            "config": {str(k): str(v) for k, v in config.items()},
            "broker_config": {str(b): {str(k): str(v) for k, v in c.items()}
                              for b, c in broker_config.items()},
        }
        _write_spec(directory, spec)
        cluster = cls(directory, spec)
        for broker_id in ports:
            cluster._write_properties(broker_id)
        return cluster

    def _give_kafka_listeners(self) -> None:
        """A cluster made before brokers had a Kafka listener gets one per broker (a
        free port each, in cluster.json and the brokers' server.properties)."""
        missing = [b for b in self.broker_ids if b not in self.kafka_ports]
        for broker_id in missing:
            self.kafka_ports[broker_id] = _free_port()
        if missing:
            self._save_spec()
            for broker_id in missing:
                self._write_properties(broker_id)

    @classmethod
    def open(cls, directory) -> "Cluster":
        directory = Path(directory)
        if not directory.is_dir():
            raise ClusterError(f"no such directory: {directory}")
        try:
            spec = json.loads((directory / CLUSTER_FILE).read_text())
        except FileNotFoundError:
            raise ClusterError(f"no cluster in {directory} ({CLUSTER_FILE} missing)") from None
        except ValueError as e:
            raise ClusterError(f"{directory / CLUSTER_FILE} is not valid JSON: {e}") from None
        return cls(directory, spec)

    # ------------------------------------------------------------- waiting
    def wait_for(self, predicate, timeout_s: float = 30.0, what: str = "a condition",
                 interval_s: float = POLL_INTERVAL_S):
        """Poll ``predicate()`` until it returns something truthy; returns that value."""
        return poll_until(predicate, timeout_s, what, interval_s=interval_s)

    def _check_started(self, process: Process, when: str = "during start-up") -> None:
        if process.pid() is None:
            raise ClusterError(f"{process.name} is not running ({when}); log tail "
                               f"({process.log_path}):\n{process.log_tail()}")

    def wait_zk_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        """Until ZooKeeper accepts connections; our own zk_lite must also have said, in
        its log since its last start, that it listens on the cluster's port. Without
        that check, another program that took the port between ``_free_port`` and
        zk_lite's bind (a zk_lite restarted on its old port, say) passed for ours: the
        brokers then joined that other cluster's coordinator."""
        zk = self.processes.get("zk")
        port = self.zookeeper.rsplit(":", 1)[1]

        def ready() -> bool:
            if zk is not None:
                self._check_started(zk)
                _, mark, said = zk.log_tail(ZK_LOG_TAIL_BYTES).rpartition(START_MARK)
                # (no start line in the tail: it started long ago, and said so then)
                if mark and not re.search(rf"{ZK_LISTENING} \S+:{port}\b", said):
                    return False
            return _reachable(self.zookeeper, 0.5)

        self.wait_for(ready, timeout_s, f"ZooKeeper at {self.zookeeper}")

    def wait_broker_ready(self, broker_id: int, timeout_s: float = READY_TIMEOUT_S,
                          peers: list[int] | None = None) -> None:
        """Until broker ``broker_id`` is registered and its Metadata answer names a
        controller and every broker of ``peers`` (itself by default): the controller
        has told it about the cluster (UpdateMetadata). A broker or our zk_lite that
        exits meanwhile is a ClusterError at once, and so is a peer of ours that is
        not running (it will never register); a timeout says what was seen last
        (``_readiness``) with the broker's log tail."""
        process = self.processes[str(broker_id)]
        zk = self.processes.get("zk")
        expected = set(peers or [broker_id])
        ours = [self.processes[str(p)] for p in sorted(expected - {broker_id})
                if str(p) in self.processes]
        seen: dict[str, object] = {}

        def ready() -> bool:
            self._check_started(process)
            for peer in ours:
                self._check_started(peer, f"while broker {broker_id} waits to learn "
                                          "of it")
            if zk is not None:
                self._check_started(zk, "while waiting for broker "
                                        f"{broker_id}: the brokers cannot register")
            try:
                registered = seen["registered"] = self.registered_brokers()
            except ClusterError as e:
                seen["registered"] = e
                return False
            if broker_id not in registered:
                return False
            answer = seen["metadata"] = self.broker_metadata(broker_id)
            return answer is not None and expected <= set(answer[0]) and answer[1] >= 0

        what = (f"broker {broker_id} to register and to learn of the controller and "
                f"brokers {sorted(expected)}")
        try:
            self.wait_for(ready, timeout_s, what)
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {self._readiness(broker_id, seen)}; broker "
                               f"{broker_id}'s log tail ({process.log_path}):\n"
                               f"{process.log_tail()}") from None

    def _readiness(self, broker_id: int, seen: dict) -> str:
        """What ``wait_broker_ready`` saw last, for its timeout message."""
        registered = seen.get("registered")
        if registered is None:
            parts = ["the coordinator was never asked"]
        elif isinstance(registered, ClusterError):
            parts = [f"the coordinator did not answer ({registered})"]
        else:
            parts = [f"registered brokers {registered}"]
            if broker_id in registered:
                answer = seen.get("metadata")
                parts.append("its Metadata answer: none (no answer within "
                             f"{METADATA_TIMEOUT_MS} ms)" if answer is None else
                             f"its Metadata answer: brokers {answer[0]}, controller "
                             f"{answer[1]}")
        try:
            parts.append(f"/controller: {self.controller_id()}")
        except ClusterError as e:
            parts.append(f"/controller unreadable ({e})")
        zk = self.processes.get("zk")
        if zk is not None:
            parts.append(f"zk_lite {zk.state()}")
        return "; ".join(parts)

    def _start_all(self, ready_timeout_s: float | None) -> None:
        self._start_zk_rebinding(ready_timeout_s)
        for broker_id in self.broker_ids:
            process = self.processes[str(broker_id)]
            if process.pid() is None:
                process.start()
        if ready_timeout_s is not None:
            # first every broker on its own (registered: its ports are bound), each
            # started again where a port was taken; only then each learns of all the
            # others (waiting for that first missed a peer that had exited: CI, once)
            deadline = time.monotonic() + ready_timeout_s
            for broker_id in self.broker_ids:
                self._wait_ready_rebinding(broker_id, deadline)
            for broker_id in self.broker_ids:
                self.wait_broker_ready(broker_id, max(1.0, deadline - time.monotonic()),
                                       peers=self.broker_ids)

    def _start_zk_rebinding(self, ready_timeout_s: float | None) -> None:
        """Start our zk_lite (unless running) and wait until it is ready; like a broker,
        a zk_lite whose port was taken meanwhile gets a new one (written to cluster.json
        and every broker's server.properties: the brokers start after it) and starts
        again, up to ``PORT_RETRIES`` times."""
        zk = self.processes.get("zk")
        started = zk is not None and zk.pid() is None
        if started:
            zk.start()
        if ready_timeout_s is None:
            return
        for attempt in range(PORT_RETRIES + 1):
            try:
                self.wait_zk_ready(ready_timeout_s)
                return
            except ClusterError:
                if not started or attempt == PORT_RETRIES or zk.pid() is not None or \
                        self.netns or not _port_was_taken(zk.log_tail()):
                    raise
            host = self.zookeeper.rsplit(":", 1)[0]
            log.warning("zk_lite's port %s was taken: starting it again on another",
                        self.zookeeper)
            self.zookeeper = self.spec["zookeeper"] = f"{host}:{_free_port()}"
            self._save_spec()
            self._build_processes()
            zk = self.processes["zk"]
            for broker_id in self.broker_ids:
                self._write_properties(broker_id)
            zk.start()

    def _wait_ready_rebinding(self, broker_id: int, deadline: float) -> None:
        """``wait_broker_ready``; a broker that exits because one of its ports was taken
        meanwhile (the ports are picked free, then bound by the broker: another process
        can take one in between, as parallel tests do) gets new ports and starts again,
        up to ``PORT_RETRIES`` times."""
        process = self.processes[str(broker_id)]
        for attempt in range(PORT_RETRIES + 1):
            try:
                self.wait_broker_ready(broker_id, max(1.0, deadline - time.monotonic()))
                return
            except ClusterError:
                if attempt == PORT_RETRIES or process.pid() is not None or \
                        self.netns or not _port_was_taken(process.log_tail()):
                    raise
            self.broker_ports[broker_id] = _free_port()
            self.kafka_ports[broker_id] = _free_port()
            self._save_spec()
            self._write_properties(broker_id)
            process.start()

    # ------------------------------------------------------------- operations
    def stop(self, ident, grace_s: float = STOP_GRACE_S) -> None:
        """Clean stop of one process (CONT, TERM, KILL after grace_s), waits until gone."""
        self.process(ident).stop(grace_s)

    def start(self, ident, *, wait: bool = True,
              ready_timeout_s: float = READY_TIMEOUT_S) -> int:
        """Start a dead process again with the same config, port and data (a
        SIGSTOPped one is resumed with SIGCONT)."""
        process = self.process(ident)
        if process.state() == "stopped":  # SIGSTOPped: starting it means resuming it
            pid = process.pid()
            process.signal(signals.SIGCONT)
            return pid
        if process.pid() is not None:
            raise ClusterError(f"{process.name} is already running (pid {process.pid()})")
        process.forget()
        pid = process.start()
        if wait:
            if process.name == "zk":
                self.wait_zk_ready(ready_timeout_s)
            else:
                self.wait_broker_ready(int(process.name.split()[1]), ready_timeout_s)
        return pid

    def down(self, grace_s: float = STOP_GRACE_S) -> int:
        """Stop every process and remove the cluster's shared memory; returns how many
        shared-memory objects were removed.

        Order: the brokers that are not the controller (in parallel: CONT, TERM), so
        the controller is there to move their leaderships in a controlled shutdown;
        then the controller; then zk_lite. Whatever outlives ``grace_s`` after its
        TERM is SIGKILLed. The last broker standing cannot move its leaderships
        anywhere, so (as in Kafka) its controlled shutdown retries
        ``controlled.shutdown.max.retries`` times ``controlled.shutdown.retry.backoff.ms``
        before it stops; a small ``grace_s`` cuts that short with SIGKILL."""
        try:
            controller = self.controller_id() if self.zk_process_alive() else None
        except ClusterError:
            controller = None
        self._close_zk()
        brokers = [self.processes[str(b)] for b in self.broker_ids]
        last = [p for b, p in zip(self.broker_ids, brokers) if b == controller]
        first = [p for p in brokers if p not in last]
        for group in (first, last):
            self._stop_together(group, grace_s)
        if "zk" in self.processes:
            self.processes["zk"].stop(grace_s)
        self._destroy_mesh()
        return cleanup_cluster(self.cluster_id)

    @staticmethod
    def _stop_together(processes: list[Process], grace_s: float) -> None:
        for p in processes:
            if p.signal(signals.SIGCONT):
                p.signal(signals.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in processes:
            if not p.wait_dead(max(0.0, deadline - time.monotonic())):
                log.warning("%s did not stop within %.0f s of SIGTERM: SIGKILL", p.name, grace_s)
                p.kill_now()
            p.forget()

    def close(self) -> None:
        """Drop the ZooKeeper client; the processes keep running."""
        self._close_zk()

    # ------------------------------------------------------------- growing and shrinking
    # Membership only; node.cluster.scale plans and runs the data movement around these.

    def add_broker(self, *, ready_timeout_s: float = READY_TIMEOUT_S) -> int:
        """Add broker max(id)+1 to cluster.json, write its config, start it and wait until
        it is registered and knows the controller; returns its id."""
        if len(self.broker_ports) >= BROKERS_MAX:
            raise ClusterError(f"a cluster has at most {BROKERS_MAX} brokers")
        broker_id = max(self.broker_ids, default=-1) + 1
        self.broker_ports[broker_id] = _free_port()
        self.kafka_ports[broker_id] = _free_port()
        self._save_spec()
        if self.mesh is not None:
            self.add_client_node(f"b{broker_id}")  # its namespace, meshed like the others
        self._write_properties(broker_id)
        process = self.processes[str(broker_id)] = self._broker_process(broker_id)
        process.start()
        self.wait_broker_ready(broker_id, ready_timeout_s)
        return broker_id

    def forget_broker(self, broker_id: int, grace_s: float = STOP_GRACE_S,
                      timeout_s: float = 30.0) -> None:
        """Stop broker ``broker_id``, wait until its registration is gone, and remove it
        (its entry in cluster.json and its directory). Its replicas must have been moved
        first."""
        process = self.process(broker_id)
        process.stop(grace_s)
        self.wait_for(lambda: broker_id not in self.registered_brokers(), timeout_s,
                      f"broker {broker_id}'s registration to disappear")
        del self.processes[str(broker_id)]
        del self.broker_ports[broker_id]
        self.kafka_ports.pop(broker_id, None)
        self.spec.get("broker_config", {}).pop(str(broker_id), None)
        self._save_spec()
        shutil.rmtree(self.broker_dir(broker_id), ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"<Cluster {self.cluster_id} in {self.dir}: {self.bootstrap_servers}>"
