"""The cluster's directory and its files: ``cluster.json`` (the spec), each broker's
``server.properties``, the processes' command lines, and looking a process up by id.
``Layout`` is a mixin of ``supervisor.Cluster``.

One directory ``D`` holds everything of one cluster::

    D/cluster.json                 cluster id, ZooKeeper address, broker ids and ports
                                   (native and Kafka's), the --config overrides
                                   (written once by ``up``)
    D/zk/                          zk_lite's data dir (unless ZooKeeper is external)
    D/zk.pid  D/zk.log             pid file and output of the zk_lite process
    D/broker-N/server.properties   broker N's config (Kafka keys)
    D/broker-N/logs/               broker N's log.dirs
    D/broker-N.pid D/broker-N.log  pid file and output of broker N
    D/netns.json                   --netns only: the live mesh (subnet, nodes)

Rules:
- ``cluster.json`` is written atomically (a reader never sees half of it).
- Paths written into configs and command lines are absolute (``Cluster`` makes ``D``
  absolute), so the processes do not depend on the caller's directory.
- ``--config`` overrides apply to every broker, ``broker_config`` to one; both over the
  supervisor's defaults.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import uuid
from pathlib import Path

from node import ports
from node.cluster.process import ClusterError, Process
from node.config import ConfigError, parse_key_values

CLUSTER_FILE = "cluster.json"
NETNS_FILE = "netns.json"  # the live mesh of a --netns cluster (subnet, nodes)
HOST = "127.0.0.1"
ZK_TICK_TIME_MS = 500  # lets brokers ask for session timeouts down to 1 s
ZK_CONNECT_TIMEOUT_S = 5.0
BROKERS_MAX = 64


def _free_port() -> int:
    """A port free now and not picked before by this process, outside the kernel's
    ephemeral range (``node.ports``): the ports are bound later by the processes
    started, and again when one is restarted, so two picks of one cluster must differ
    (zk_lite and a broker's Kafka listener once got the same one, and that broker exited
    at start-up), and no outgoing connection may take one while its process is down."""
    return ports.free_port(HOST)


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


def new_cluster_id() -> str:
    return "c" + uuid.uuid4().hex[:16]


def parse_config_pairs(pairs) -> dict[str, str]:
    """``cluster up --config k=v``: the common parser, its error a ClusterError."""
    try:
        return parse_key_values(pairs, "--config")
    except ConfigError as e:
        raise ClusterError(str(e)) from None


def _write_spec(directory: Path, spec: dict) -> None:
    """cluster.json, written atomically (a reader never sees half of it)."""
    tmp = directory / (CLUSTER_FILE + ".tmp")
    tmp.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, directory / CLUSTER_FILE)


class Layout:
    """The directory, the spec and the processes of a ``supervisor.Cluster`` (rules
    above)."""

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

    def broker_dir(self, broker_id: int) -> Path:
        return self.dir / f"broker-{broker_id}"

    def _write_properties(self, broker_id: int) -> None:
        props = {
            "broker.id": str(broker_id),
            "listeners": self._listeners(broker_id),
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
        if self.spec.get("netns"):
            # every process in its own network namespace, but one /dev/shm: a follower
            # copying through shared memory would replicate across a cut link
            props["replica.transport"] = "fetch"
        path = self.broker_dir(broker_id) / "server.properties"
        path.parent.mkdir(parents=True, exist_ok=True)
        (self.broker_dir(broker_id) / "logs").mkdir(exist_ok=True)
        lines = [f"# written by minikafka cluster up for cluster {self.cluster_id}"]
        lines += [f"{k}={v}" for k, v in props.items()]
        path.write_text("\n".join(lines) + "\n")

    def _listeners(self, broker_id: int) -> str:
        """The native listener, and Kafka's where the spec gives the broker a port."""
        host = self.host_of(broker_id)
        out = f"PLAINTEXT://{host}:{self.broker_ports[broker_id]}"
        if broker_id in self.kafka_ports:
            out += f",KAFKA://{host}:{self.kafka_ports[broker_id]}"
        return out

    def _save_spec(self) -> None:
        self.spec["brokers"] = {str(b): p for b, p in sorted(self.broker_ports.items())}
        self.spec["kafka_brokers"] = {str(b): p for b, p in sorted(self.kafka_ports.items())}
        _write_spec(self.dir, self.spec)

    # ------------------------------------------------------------- properties
    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.broker_ports)

    @property
    def bootstrap_servers(self) -> str:
        """The native listeners (node.client's bootstrap servers)."""
        return ",".join(self.broker_address(b) for b in self.broker_ids)

    @property
    def kafka_bootstrap_servers(self) -> str:
        """The Kafka-protocol listeners (any Kafka client's bootstrap.servers)."""
        return ",".join(a for b in self.broker_ids if (a := self.kafka_address(b)))

    def broker_address(self, broker_id: int) -> str:
        return f"{self.host_of(broker_id)}:{self.broker_ports[broker_id]}"

    def kafka_address(self, broker_id: int) -> str | None:
        """HOST:PORT of the broker's Kafka listener; None for a cluster created before
        brokers had one."""
        port = self.kafka_ports.get(broker_id)
        return None if port is None else f"{self.host_of(broker_id)}:{port}"

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
