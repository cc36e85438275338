"""The cluster supervisor: start, inspect, kill, restart and stop a local cluster.

One directory ``D`` holds everything of one cluster::

    D/cluster.json                 cluster id, ZooKeeper address, broker ids and ports,
                                   the --config overrides (written once by ``up``)
    D/zk/                          zk_lite's data dir (unless ZooKeeper is external)
    D/zk.pid  D/zk.log             pid file and output of the zk_lite process
    D/broker-N/server.properties   broker N's config (Kafka keys)
    D/broker-N/logs/               broker N's log.dirs
    D/broker-N.pid D/broker-N.log  pid file and output of broker N
    D/netns.json                   --netns only: the live mesh (subnet, nodes)

With ``--netns`` (root only) every process runs in its own network namespace with its
own address, joined to the others by a full mesh of veth links that faults can cut
(``node.cluster.netns``); ``down`` removes the namespaces.

Every process runs in its own session (so its process group is its pid and a signal
to the group reaches anything it started) and outlives the ``minikafka cluster up``
command that started it. A pid file holds ``pid start_time`` (the start time from
/proc/PID/stat), so a recycled pid is never mistaken for our process.

Process states, as ``status`` prints them: ``alive`` (running), ``stopped`` (SIGSTOPped;
SIGCONT resumes it) and ``dead`` (not running: killed, exited, or never started).

``down`` stops the brokers first (SIGCONT, then SIGTERM so they shut down in a
controlled way; SIGKILL after a grace period; the controller last), then zk_lite, and
removes the cluster's shared memory (``shm.names.cleanup_cluster``). The data stays in D: ``up`` on the same
directory starts the same cluster again.

The Python API (``Cluster``) is what tests use; the CLI (``minikafka cluster ...``) is a
thin layer over it that turns ``ClusterError`` into a one-line message.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal as signals
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from node.config import ConfigError, parse_key_values
from node.paths import child_env
from node.waiting import poll_until
from shm.names import check_cluster_id, cleanup_cluster

CLUSTER_FILE = "cluster.json"
NETNS_FILE = "netns.json"  # the live mesh of a --netns cluster (subnet, nodes)
HOST = "127.0.0.1"
ZK_TICK_TIME_MS = 500  # lets brokers ask for session timeouts down to 1 s
READY_TIMEOUT_S = 90.0
STOP_GRACE_S = 30.0  # > controlled.shutdown.max.retries x retry.backoff.ms (3 x 5 s)
KILL_WAIT_S = 10.0
ZK_CONNECT_TIMEOUT_S = 5.0
METADATA_TIMEOUT_MS = 2000
POLL_INTERVAL_S = 0.05
BROKERS_MAX = 64
SIGNALS = {"KILL": signals.SIGKILL, "TERM": signals.SIGTERM, "STOP": signals.SIGSTOP,
           "CONT": signals.SIGCONT, "INT": signals.SIGINT}

log = logging.getLogger("minikafka.cluster")


class ClusterError(Exception):
    """A supervisor operation cannot be done; the message is meant for a user."""


@dataclass(frozen=True)
class ProcessStatus:
    name: str  # "zk" or "broker N"
    pid: int | None
    state: str  # alive | stopped | dead
    address: str
    role: str  # "", "controller", "zookeeper"


# ----------------------------------------------------------------- processes

def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rindex(")") + 2:].split()  # the command name may hold spaces
    return fields[0], int(fields[19])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _reachable(hosts: str, timeout_s: float) -> bool:
    """Whether any server of a ZooKeeper connect string accepts a TCP connection."""
    for hostport in hosts.split("/", 1)[0].split(","):
        host, _, port = hostport.strip().rpartition(":")
        try:
            with socket.create_connection((host or HOST, int(port)), timeout=timeout_s):
                return True
        except (OSError, ValueError):
            continue
    return False


class Process:
    """One supervised process: its command, pid file and log file."""

    def __init__(self, name: str, command: list[str], pid_path: Path, log_path: Path):
        self.name = name
        self.command = command
        self.pid_path = pid_path
        self.log_path = log_path
        self.popen: subprocess.Popen | None = None  # when this Python process started it

    def pid(self) -> int | None:
        """The pid of the live (or stopped) process, None if it is dead."""
        try:
            pid_text, start_text = self.pid_path.read_text().split()
            pid, start_ticks = int(pid_text), int(start_text)
        except (OSError, ValueError):
            return None
        if self.popen is not None and self.popen.pid == pid:
            self.popen.poll()  # reap it if it died, so it does not linger as a zombie
        stat = _proc_stat(pid)
        if stat is None or stat[1] != start_ticks or stat[0] in "ZX":
            return None
        return pid

    def state(self) -> str:
        pid = self.pid()
        if pid is None:
            return "dead"
        stat = _proc_stat(pid)
        return "stopped" if stat is not None and stat[0] in "Tt" else "alive"

    def start(self) -> int:
        if self.pid() is not None:
            raise ClusterError(f"{self.name} is already running (pid {self.pid()})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = child_env()  # the same code as this process, in a checkout or installed
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as out:
            out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} supervisor starts: "
                      f"{' '.join(self.command)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.command, cwd=self.log_path.parent, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, env=env)
        stat = _proc_stat(self.popen.pid)
        start_ticks = stat[1] if stat is not None else 0
        tmp = self.pid_path.with_suffix(".pid.tmp")
        tmp.write_text(f"{self.popen.pid} {start_ticks}\n")
        os.replace(tmp, self.pid_path)
        return self.popen.pid

    def signal(self, sig: int) -> bool:
        """Signal the process group; False if the process is dead."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait_dead(self, timeout_s: float) -> bool:
        try:
            poll_until(lambda: self.pid() is None, timeout_s, f"{self.name} to exit",
                       interval_s=POLL_INTERVAL_S)
        except TimeoutError:
            return False
        return True

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """CONT (a stopped process cannot handle TERM), TERM, then KILL after grace_s."""
        if self.signal(signals.SIGCONT):
            self.signal(signals.SIGTERM)
            if not self.wait_dead(grace_s):
                self.kill_now()
        self.forget()

    def kill_now(self) -> None:
        self.signal(signals.SIGKILL)
        if not self.wait_dead(KILL_WAIT_S):
            raise ClusterError(f"{self.name} (pid {self.pid()}) survived SIGKILL")

    def forget(self) -> None:
        if self.popen is not None:
            try:
                self.popen.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            self.pid_path.unlink()
        except FileNotFoundError:
            pass

    def log_tail(self, max_bytes: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except OSError:
            return ""


# ----------------------------------------------------------------- the cluster

def new_cluster_id() -> str:
    return "c" + uuid.uuid4().hex[:16]


def parse_config_pairs(pairs) -> dict[str, str]:
    """``cluster up --config k=v``: the common parser, its error a ClusterError."""
    try:
        return parse_key_values(pairs, "--config")
    except ConfigError as e:
        raise ClusterError(str(e)) from None


class Cluster:
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
        self.netns: bool = bool(spec.get("netns"))
        self.mesh = self._load_mesh()
        self.processes: dict[str, Process] = {}
        self._build_processes()
        self._zk = None

    def _build_processes(self) -> None:
        if not self.external_zookeeper:
            port = int(self.zookeeper.rsplit(":", 1)[1])
            self.processes["zk"] = Process(
                "zk", self._prefix("zk") +
                [sys.executable, "-m", "zk_lite", "--host", self.host_of("zk"), "--port",
                 str(port), "--data-dir", str(self.dir / "zk"), "--tick-time",
                 str(self.spec.get("zk_tick_time_ms", ZK_TICK_TIME_MS))],
                self.dir / "zk.pid", self.dir / "zk.log")
        for broker_id in self.broker_ports:
            self.processes[str(broker_id)] = self._broker_process(broker_id)

    def _broker_process(self, broker_id: int) -> Process:
        """The one command line of a broker: ``python -m node.broker --config F``."""
        return Process(f"broker {broker_id}",
                       self._prefix(f"b{broker_id}") +
                       [sys.executable, "-m", "node.broker", "--config",
                        str(self.broker_dir(broker_id) / "server.properties")],
                       self.dir / f"broker-{broker_id}.pid",
                       self.dir / f"broker-{broker_id}.log")

    # ------------------------------------------------------------- network namespaces
    def _load_mesh(self):
        """The live mesh of a ``--netns`` cluster (``D/netns.json``), None if not built."""
        if not self.netns:
            return None
        from node.cluster.netns import Mesh
        try:
            data = json.loads((self.dir / NETNS_FILE).read_text())
        except (OSError, ValueError):
            return None
        return Mesh.from_json(self.cluster_id, data)

    def _prefix(self, node: str) -> list[str]:
        return self.mesh.command(node) if self.mesh is not None else []

    def host_of(self, ident) -> str:
        """The address a process listens on: 127.0.0.1, or its namespace's address."""
        if self.mesh is None:
            return HOST
        node = "zk" if str(ident) == "zk" else f"b{int(ident)}"
        return self.mesh.address(node)

    def _build_mesh(self) -> None:
        """Create the namespaces of zk_lite and every broker (a fresh subnet each
        ``up``), then point the configs at the new addresses."""
        from node.cluster.netns import Mesh, NetnsError, destroy_cluster

        destroy_cluster(self.cluster_id)  # a previous run's leftovers, if any
        nodes = (["zk"] if not self.external_zookeeper else []) + \
            [f"b{b}" for b in self.broker_ids]
        try:
            self.mesh = Mesh.create(self.cluster_id, nodes)
        except NetnsError as e:
            raise ClusterError(str(e)) from None
        self._save_mesh()
        if not self.external_zookeeper:
            port = self.zookeeper.rsplit(":", 1)[1]
            self.zookeeper = self.spec["zookeeper"] = f"{self.mesh.address('zk')}:{port}"
            _write_spec(self.dir, self.spec)
        self.processes = {}
        self._build_processes()
        for broker_id in self.broker_ids:
            self._write_properties(broker_id)

    def _save_mesh(self) -> None:
        tmp = self.dir / (NETNS_FILE + ".tmp")
        tmp.write_text(json.dumps(self.mesh.to_json()) + "\n")
        os.replace(tmp, self.dir / NETNS_FILE)

    def add_client_node(self, name: str) -> list[str]:
        """A namespace for a client process (``p0``, ``c1`` ...) meshed with every
        node; returns the command prefix that runs a program in it. [] without netns."""
        if self.mesh is None:
            return []
        from node.cluster.netns import NetnsError
        try:
            self.mesh.add_node(name)
        except NetnsError as e:
            raise ClusterError(str(e)) from None
        self._save_mesh()
        return self.mesh.command(name)

    def node_of(self, ident) -> str:
        """The mesh node of a process id: ``zk``, a broker id (-> ``bN``), ``controller``,
        or a client node's own name (``p0``)."""
        key = self._resolve_controller(ident)
        if key.isdigit():
            key = f"b{int(key)}"
        if self.mesh is None or key not in self.mesh.nodes:
            known = ", ".join(self.mesh.nodes) if self.mesh is not None else "none"
            raise ClusterError(f"{str(ident)!r} is not a node of this cluster's network "
                               f"(nodes: {known})" if self.mesh is not None else
                               "this cluster was not started with --netns: no links to cut")
        return key

    def cut(self, a, b) -> tuple[str, str]:
        """Partition two processes from each other (both directions); ``--netns`` only."""
        from node.cluster.netns import NetnsError
        pair = (self.node_of(a), self.node_of(b))
        try:
            self.mesh.cut(*pair)
        except NetnsError as e:
            raise ClusterError(str(e)) from None
        return pair

    def heal(self, a=None, b=None) -> list[tuple[str, str]]:
        """Bring the link between ``a`` and ``b`` back (every cut link without them)."""
        from node.cluster.netns import NetnsError
        if self.mesh is None:
            raise ClusterError("this cluster was not started with --netns: no links to heal")
        try:
            if a is None:
                links = self.mesh.cut_links()
                self.mesh.heal_all()
                return links
            pair = (self.node_of(a), self.node_of(b))
            self.mesh.heal(*pair)
            return [pair]
        except NetnsError as e:
            raise ClusterError(str(e)) from None

    def isolate(self, ident) -> list[tuple[str, str]]:
        """Cut one process from every other node of the mesh."""
        node = self.node_of(ident)
        return [self.cut(node, other) for other in self.mesh.nodes if other != node]

    def _destroy_mesh(self) -> None:
        if self.mesh is not None:
            self.mesh.destroy()
            self.mesh = None
        elif self.netns:
            from node.cluster.netns import destroy_cluster
            destroy_cluster(self.cluster_id)
        try:
            (self.dir / NETNS_FILE).unlink()
        except FileNotFoundError:
            pass

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
        spec = {
            "cluster_id": cluster_id,
            "zookeeper": zookeeper or f"{HOST}:{_free_port()}",
            "external_zookeeper": zookeeper is not None,
            "netns": bool(netns),
            "zk_tick_time_ms": ZK_TICK_TIME_MS,
            "brokers": {str(i): p for i, p in ports.items()},
            "config": {str(k): str(v) for k, v in config.items()},
            "broker_config": {str(b): {str(k): str(v) for k, v in c.items()}
                              for b, c in broker_config.items()},
        }
        _write_spec(directory, spec)
        cluster = cls(directory, spec)
        for broker_id in ports:
            cluster._write_properties(broker_id)
        return cluster

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

    def broker_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def _write_properties(self, broker_id: int) -> None:
        props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://{self.host_of(broker_id)}:{self.broker_ports[broker_id]}",
            "log.dirs": str(self.broker_dir(broker_id) / "logs"),
            "zookeeper.connect": self.zookeeper,
            "cluster.id": self.cluster_id,
            # A laptop cluster: a controlled shutdown that cannot move every leadership
            # (the last broker of the partition, or `cluster down` stopping all of
            # them) retries after 0.5 s instead of Kafka's 5 s. --config overrides it.
            "controlled.shutdown.retry.backoff.ms": "500",
        }
        props.update(self.spec.get("config", {}))
        props.update(self.spec.get("broker_config", {}).get(str(broker_id), {}))
        path = self.broker_dir(broker_id) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        (self.broker_dir(broker_id) / "logs").mkdir(exist_ok=True)
        lines = [f"# written by minikafka cluster up for cluster {self.cluster_id}"]
        lines += [f"{k}={v}" for k, v in props.items()]
        path.write_text("\n".join(lines) + "\n")

    # ------------------------------------------------------------- properties
    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.broker_ports)

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.broker_address(b) for b in self.broker_ids)

    def broker_address(self, broker_id: int) -> str:
        return f"{self.host_of(broker_id)}:{self.broker_ports[broker_id]}"

    def _resolve_controller(self, ident) -> str:
        """``ident`` as text, with ``controller`` replaced by the elected broker's id."""
        key = str(ident).strip()
        if key == "controller":
            controller = self.controller_id()
            if controller is None:
                raise ClusterError("no controller is elected right now")
            key = str(controller)
        return key

    def process(self, ident) -> Process:
        """The process named by ``ident``: a broker id, ``"controller"`` or ``"zk"``."""
        key = self._resolve_controller(ident)
        if key == "zk" and self.external_zookeeper:
            raise ClusterError(f"ZooKeeper is external ({self.zookeeper}); "
                               f"the supervisor does not manage it")
        if key not in self.processes:
            known = ", ".join(["zk"] * (not self.external_zookeeper) +
                              [str(b) for b in self.broker_ids] + ["controller"])
            raise ClusterError(f"unknown process id {str(ident)!r} (known: {known})")
        return self.processes[key]

    # ------------------------------------------------------------- ZooKeeper view
    def zk(self):
        """The supervisor's kazoo client: created on first use and kept until
        ``down``/``close`` (it reconnects by itself, so a reference stays valid across
        a ZooKeeper restart). Raises ClusterError if ZooKeeper cannot be reached."""
        from kazoo.client import KazooClient
        from kazoo.retry import KazooRetry

        if self._zk is None:
            client = KazooClient(hosts=self.zookeeper, timeout=ZK_CONNECT_TIMEOUT_S,
                                 connection_retry=KazooRetry(max_tries=-1, delay=0.1,
                                                             max_delay=1.0))
            try:
                client.start(timeout=ZK_CONNECT_TIMEOUT_S)
            except Exception:
                client.stop()
                client.close()
                raise ClusterError(f"cannot reach ZooKeeper at {self.zookeeper}") from None
            self._zk = client
        return self._zk

    def _connected_zk(self):
        """The client once it is connected (waits up to ZK_CONNECT_TIMEOUT_S)."""
        client = self.zk()
        poll_until(lambda: client.connected, ZK_CONNECT_TIMEOUT_S, "a connection",
                   interval_s=POLL_INTERVAL_S, error=lambda message: ClusterError(
                       f"cannot reach ZooKeeper at {self.zookeeper} ({message})"))
        return client

    def _close_zk(self) -> None:
        if self._zk is not None:
            try:
                self._zk.stop()
                self._zk.close()
            except Exception:
                pass
            self._zk = None

    def _zk_call(self, fn, default):
        """Run ``fn(client)``; a missing znode gives ``default``, a lost connection a
        ClusterError (the client keeps reconnecting in the background)."""
        from kazoo.exceptions import KazooException, NoNodeError

        from node.wire.zkdata import ZkDataError

        try:
            return fn(self._connected_zk())
        except (NoNodeError, ZkDataError):
            return default
        except (KazooException, TimeoutError) as e:
            raise ClusterError(f"ZooKeeper at {self.zookeeper} did not answer "
                               f"({type(e).__name__})") from None

    def controller_id(self) -> int | None:
        """The broker id in /controller, None if no controller is elected."""
        from node.wire.zkdata import CONTROLLER, decode_controller

        return self._zk_call(lambda zk: decode_controller(zk.get(CONTROLLER)[0]), None)

    def move_controller(self) -> int | None:
        """Delete /controller: every broker's watch fires and a new election runs (the
        operators' way to move Kafka's controller). Returns the controller it deposed,
        None if none was elected."""
        from node.wire.zkdata import CONTROLLER, decode_controller

        def delete(zk):
            data, stat = zk.get(CONTROLLER)
            zk.delete(CONTROLLER, version=stat.version)
            return decode_controller(data)

        return self._zk_call(delete, None)

    def partition_state(self, topic: str, partition: int):
        """The partition-state znode (``node.wire.zkdata.PartitionState``: leader,
        leader_epoch, isr, controller_epoch, zk_version), None if absent."""
        from node.wire.zkdata import decode_partition_state, partition_state_path

        def read(zk):
            data, stat = zk.get(partition_state_path(topic, partition))
            return decode_partition_state(data, stat.version)

        return self._zk_call(read, None)

    def registered_brokers(self) -> list[int]:
        from node.wire.zkdata import BROKER_IDS

        return self._zk_call(lambda zk: sorted(
            int(c) for c in zk.get_children(BROKER_IDS) if c.isdigit()), [])

    def broker_metadata(self, broker_id: int) -> tuple[list[int], int] | None:
        """(broker ids, controller id) from broker ``broker_id``'s Metadata answer, or
        None if it does not answer."""
        from node.wire import protocol
        from node.net import Channel, ChannelError

        channel = Channel(f"tcp://{self.broker_address(broker_id)}", client_id="supervisor")
        try:
            body = channel.request(protocol.ApiKey.METADATA, {"topics": []},
                                   timeout_ms=METADATA_TIMEOUT_MS).body
            return sorted(int(b[0]) for b in body["brokers"]), int(body.get("controller_id", -1))
        except (ChannelError, KeyError, TypeError, ValueError, IndexError):
            return None
        finally:
            channel.close()

    # ------------------------------------------------------------- waiting
    def wait_for(self, predicate, timeout_s: float = 30.0, what: str = "a condition",
                 interval_s: float = POLL_INTERVAL_S):
        """Poll ``predicate()`` until it returns something truthy; returns that value."""
        return poll_until(predicate, timeout_s, what, interval_s=interval_s)

    def _check_started(self, process: Process) -> None:
        if process.pid() is None:
            raise ClusterError(f"{process.name} exited during start-up; log tail "
                               f"({process.log_path}):\n{process.log_tail()}")

    def wait_zk_ready(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        zk = self.processes.get("zk")

        def ready() -> bool:
            if zk is not None:
                self._check_started(zk)
            return _reachable(self.zookeeper, 0.5)

        self.wait_for(ready, timeout_s, f"ZooKeeper at {self.zookeeper}")

    def wait_broker_ready(self, broker_id: int, timeout_s: float = READY_TIMEOUT_S,
                          peers: list[int] | None = None) -> None:
        """Until broker ``broker_id`` is registered and its Metadata answer names a
        controller and every broker of ``peers`` (itself by default): the controller
        has told it about the cluster (UpdateMetadata)."""
        process = self.processes[str(broker_id)]
        expected = set(peers or [broker_id])

        def ready() -> bool:
            self._check_started(process)
            try:
                if broker_id not in self.registered_brokers():
                    return False
            except ClusterError:
                return False
            answer = self.broker_metadata(broker_id)
            return answer is not None and expected <= set(answer[0]) and answer[1] >= 0

        self.wait_for(ready, timeout_s, f"broker {broker_id} to register and to learn "
                                        f"of the controller and brokers {sorted(expected)}")

    def _start_all(self, ready_timeout_s: float | None) -> None:
        zk = self.processes.get("zk")
        if zk is not None and zk.pid() is None:
            zk.start()
        if ready_timeout_s is not None:
            self.wait_zk_ready(ready_timeout_s)
        for broker_id in self.broker_ids:
            process = self.processes[str(broker_id)]
            if process.pid() is None:
                process.start()
        if ready_timeout_s is not None:
            deadline = time.monotonic() + ready_timeout_s
            for broker_id in self.broker_ids:
                self.wait_broker_ready(broker_id, max(1.0, deadline - time.monotonic()),
                                       peers=self.broker_ids)

    # ------------------------------------------------------------- operations
    def status(self) -> list[ProcessStatus]:
        try:
            controller = self.controller_id() if self.zk_process_alive() else None
        except ClusterError:
            controller = None
        out = []
        if "zk" in self.processes:
            p = self.processes["zk"]
            out.append(ProcessStatus("zk", p.pid(), p.state(), self.zookeeper, "zookeeper"))
        for broker_id in self.broker_ids:
            p = self.processes[str(broker_id)]
            role = "controller" if controller == broker_id and p.pid() is not None else ""
            out.append(ProcessStatus(p.name, p.pid(), p.state(),
                                     self.broker_address(broker_id), role))
        return out

    def zk_process_alive(self) -> bool:
        zk = self.processes.get("zk")
        return zk is None or zk.state() == "alive"

    def kill(self, ident, signal="KILL") -> int:
        """Send ``signal`` (KILL, TERM, STOP, CONT, INT or a number) to a process group;
        returns the pid. KILL waits until the process is gone."""
        sig = self._signal(signal)
        process = self.process(ident)
        pid = process.pid()
        if pid is None:
            raise ClusterError(f"{process.name} is not running")
        process.signal(sig)
        if sig == signals.SIGKILL:
            process.kill_now()
        return pid

    @staticmethod
    def _signal(signal) -> int:
        if isinstance(signal, int):
            return signal
        name = str(signal).upper().removeprefix("SIG")
        if name not in SIGNALS:
            raise ClusterError(f"unknown signal {signal!r} (one of {', '.join(SIGNALS)})")
        return SIGNALS[name]

    def lose_unflushed(self, broker_id: int) -> dict[str, int]:
        """What a power cut does to a dead broker's disk: every partition's segment
        files are cut back to its recovery point (what was flushed; the page cache held
        the rest). Returns ``{"topic-partition": records lost}`` for the partitions that
        lost any. The broker must not be running."""
        from shm.checkpoint import (RECOVERY_POINT_OFFSET_CHECKPOINT,
                                    REPLICATION_OFFSET_CHECKPOINT, OffsetCheckpointFile)
        from shm.log import Log

        process = self.process(broker_id)
        if process.pid() is not None:
            raise ClusterError(f"{process.name} is running: a power cut needs it dead first")
        data_dir = self.broker_dir(broker_id) / "logs"
        try:
            points = OffsetCheckpointFile(
                str(data_dir / RECOVERY_POINT_OFFSET_CHECKPOINT)).read()
        except (OSError, ValueError):
            points = {}
        # The HW checkpoint was fsynced when written: it survives the power cut as it
        # was. (Closing a Log would rewrite it clamped to the cut log: put it back.)
        hw_file = data_dir / REPLICATION_OFFSET_CHECKPOINT
        hw_bytes = hw_file.read_bytes() if hw_file.is_file() else None
        lost = {}
        for entry in sorted(os.listdir(data_dir)) if data_dir.is_dir() else []:
            topic, _, number = entry.rpartition("-")
            if not topic or not number.isdigit() or not (data_dir / entry).is_dir():
                continue
            log_ = _open_when_released(Log, str(data_dir), topic, int(number),
                                       self.cluster_id, broker_id)
            try:
                end = log_.log_end_offset
                keep = max(log_.log_start_offset, points.get((topic, int(number)), 0))
                if keep < end:
                    log_.truncate_to(keep)
                    lost[entry] = end - keep
            finally:
                log_.close()
        if hw_bytes is not None:
            tmp = hw_file.with_suffix(".power-cut.tmp")
            tmp.write_bytes(hw_bytes)
            os.replace(tmp, hw_file)
        return lost

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

    def _save_spec(self) -> None:
        self.spec["brokers"] = {str(b): p for b, p in sorted(self.broker_ports.items())}
        _write_spec(self.dir, self.spec)

    def add_broker(self, *, ready_timeout_s: float = READY_TIMEOUT_S) -> int:
        """Add broker max(id)+1 to cluster.json, write its config, start it and wait until
        it is registered and knows the controller; returns its id."""
        if len(self.broker_ports) >= BROKERS_MAX:
            raise ClusterError(f"a cluster has at most {BROKERS_MAX} brokers")
        broker_id = max(self.broker_ids, default=-1) + 1
        self.broker_ports[broker_id] = _free_port()
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
        self.spec.get("broker_config", {}).pop(str(broker_id), None)
        self._save_spec()
        shutil.rmtree(self.broker_dir(broker_id), ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def __repr__(self) -> str:
        return f"<Cluster {self.cluster_id} in {self.dir}: {self.bootstrap_servers}>"


def _open_when_released(log_class, data_dir: str, topic: str, partition: int,
                        cluster_id: str, broker_id: int):
    """Open a dead broker's log. A SIGKILLed process shows as a zombie as soon as its
    main thread is gone, but its files (and the log's flock) are released only when its
    last thread has exited: wait for that."""
    from shm.errors import LogError

    def attempt():
        try:
            return log_class.open(data_dir, topic, partition, cluster_id=cluster_id,
                                  broker_id=broker_id)
        except LogError as e:
            if "is open in another Log" not in str(e):
                raise
            return None

    return poll_until(attempt, KILL_WAIT_S, f"{data_dir}/{topic}-{partition}'s lock",
                      interval_s=POLL_INTERVAL_S)


def _write_spec(directory: Path, spec: dict) -> None:
    """cluster.json, written atomically (a reader never sees half of it)."""
    tmp = directory / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, directory / CLUSTER_FILE)
