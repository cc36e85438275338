"""The supervisor's side of ``--netns`` (root only): every process runs in its own
network namespace with its own address, joined to the others by a full mesh of veth
links (``node.cluster.netns`` builds and cuts them). ``Namespaces`` is a mixin of
``supervisor.Cluster``.

Rules:
- ``up`` builds a fresh mesh (a new subnet) each time, then points the configs at the
  new addresses; ``D/netns.json`` holds the live mesh for later commands.
- A client process (a chaos workload) gets a namespace of its own, meshed like the rest.
- ``down`` removes the namespaces (and a previous run's leftovers).
"""
from __future__ import annotations

import json
import os

from node.cluster.layout import HOST, NETNS_FILE, _write_spec
from node.cluster.process import ClusterError


class Namespaces:
    """Network namespaces of a ``supervisor.Cluster`` (rules above)."""

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
