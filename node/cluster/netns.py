"""Real network partitions: one Linux network namespace per process, a full mesh of veth
links between them, and a management link from each to the host.

``minikafka cluster up --netns`` puts zk_lite and every broker (and, in a chaos run, every
workload process) in its own namespace. Layout of one cluster (``N`` is the cluster's
subnet number, 0..255, taken when the mesh is created)::

    namespace  mk-<cluster id>-<node>        node: zk, b0, b1 ..., p0 ..., c0 ...
    address    198.18.N.<host>/32 on its lo  zk .1, broker b .(10+b), others .100 on
    mesh link  veth "to-<peer>" in each end  one /32 route per peer over it
    mgmt link  veth "mk<N><node>" on the host, "mgmt" in the namespace
    host       198.18.N.254 on each mgmt end; "unreachable 198.18.N.0/24" on the host

198.18.0.0/15 is RFC 2544's block for benchmark networks, which nothing routes; the
host's ``unreachable`` route for the subnet makes sure no packet for it ever leaves this
machine, even to an address whose link is down.

The mesh is what faults cut. Cutting the link between two nodes takes both ends of
their veth down (the kernel drops the routes over it): new connections fail with
"network unreachable", established ones stop hearing from each other until TCP gives
up, as on a real partition. Healing brings both ends up and adds the routes back.

The management links are the supervisor's own view (its ZooKeeper client, readiness
probes, the chaos run's final read): like Jepsen's control node, no fault cuts them.
They never forward between namespaces (no namespace has a route to another through
the host, and the host does not forward).

Everything here needs root (CAP_NET_ADMIN); ``require_root`` says so in one line.
``destroy`` removes every namespace of a cluster (their veths go with them) and the
host's routes; ``leftovers`` lists what is left, for tests.
"""
from __future__ import annotations

import fcntl
import itertools
import os
import re
import subprocess
from dataclasses import dataclass, field

NETNS_DIR = "/run/netns"
LOCK_PATH = "/run/minikafka-netns.lock"
BLOCK = "198.18"  # RFC 2544: 198.18.0.0/15, never routed
HOST_OCTET = 254
SUBNETS = 256
PREFIX = "mk-"
MGMT = "mgmt"
_NODE = re.compile(r"^(zk|[bpc]\d{1,3})$")


class NetnsError(Exception):
    """A namespace operation failed or is not allowed here: one line for a user."""


def require_root() -> None:
    if os.geteuid() != 0:
        raise NetnsError("--netns and network partitions need root (network namespaces "
                         "and veth links need CAP_NET_ADMIN)")
    for tool in ("ip", "nsenter"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "/usr/sbin:/usr/bin").split(os.pathsep)
                   + ["/usr/sbin", "/sbin", "/usr/bin"]):
            raise NetnsError(f"--netns needs the '{tool}' command (iproute2, util-linux)")


def available() -> str | None:
    """None when namespaces can be used here, else why not (for skips)."""
    try:
        require_root()
    except NetnsError as e:
        return str(e)
    return None


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise NetnsError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def node_octet(node: str) -> int:
    if node == "zk":
        return 1
    kind, number = node[0], int(node[1:])
    base = {"b": 10, "p": 100, "c": 170}[kind]
    limit = {"b": 90, "p": 70, "c": 70}[kind]
    if number >= limit:
        raise NetnsError(f"node {node}: at most {limit} of its kind in a netns cluster")
    return base + number


def broker_node(broker_id: int) -> str:
    return f"b{broker_id}"


@dataclass
class Mesh:
    """One cluster's namespaces: ``subnet`` and the nodes in it."""

    cluster_id: str
    subnet: int
    nodes: list[str] = field(default_factory=list)

    # ------------------------------------------------------------- names
    def namespace(self, node: str) -> str:
        return f"{PREFIX}{self.cluster_id}-{node}"

    def address(self, node: str) -> str:
        return f"{BLOCK}.{self.subnet}.{node_octet(node)}"

    @property
    def host_address(self) -> str:
        return f"{BLOCK}.{self.subnet}.{HOST_OCTET}"

    def _host_end(self, node: str) -> str:
        name = f"mk{self.subnet}{node}"
        assert len(name) <= 15, name
        return name

    def command(self, node: str) -> list[str]:
        """The prefix that runs a command inside ``node``'s namespace (same pid)."""
        return ["nsenter", f"--net={NETNS_DIR}/{self.namespace(node)}", "--"]

    def to_json(self) -> dict:
        return {"subnet": self.subnet, "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, cluster_id: str, data: dict) -> "Mesh":
        return cls(cluster_id, int(data["subnet"]), list(data.get("nodes", [])))

    # ------------------------------------------------------------- building
    @classmethod
    def create(cls, cluster_id: str, nodes: list[str]) -> "Mesh":
        """Take a free subnet and build the namespaces of ``nodes`` fully meshed."""
        require_root()
        os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
        with open(LOCK_PATH, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = _used_subnets()
            free = [n for n in range(SUBNETS) if n not in used]
            if not free:
                raise NetnsError(f"all {SUBNETS} netns subnets are in use")
            mesh = cls(cluster_id, free[0])
            # The host's catch-all first: nothing for this subnet leaves the machine.
            _ip("route", "add", "unreachable", f"{BLOCK}.{mesh.subnet}.0/24")
        try:
            for node in nodes:
                mesh.add_node(node)
        except BaseException:
            mesh.destroy()
            raise
        return mesh

    def add_node(self, node: str) -> None:
        """A namespace for ``node``, linked to every node already there and to the host."""
        if not _NODE.match(node):
            raise NetnsError(f"bad node name {node!r}")
        if node in self.nodes:
            return
        ns = self.namespace(node)
        _ip("netns", "add", ns)
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "addr", "add", f"{self.address(node)}/32", "dev", "lo")
        host_end = self._host_end(node)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", MGMT, "netns", ns)
        _ip("link", "set", host_end, "up")
        _ip("-n", ns, "link", "set", MGMT, "up")
        _ip("addr", "add", f"{self.host_address}/32", "dev", host_end)
        _ip("route", "replace", f"{self.address(node)}/32", "dev", host_end,
            "src", self.host_address)
        _ip("-n", ns, "route", "add", f"{self.host_address}/32", "dev", MGMT,
            "src", self.address(node))
        for peer in self.nodes:
            _ip("link", "add", "name", f"to-{peer}", "netns", ns, "type", "veth",
                "peer", "name", f"to-{node}", "netns", self.namespace(peer))
            self._link_up(node, peer)
        self.nodes.append(node)

    def _link_up(self, a: str, b: str) -> None:
        for here, there in ((a, b), (b, a)):
            _ip("-n", self.namespace(here), "link", "set", f"to-{there}", "up")
        for here, there in ((a, b), (b, a)):
            _ip("-n", self.namespace(here), "route", "replace", f"{self.address(there)}/32",
                "dev", f"to-{there}", "src", self.address(here))

    # ------------------------------------------------------------- faults
    def cut(self, a: str, b: str) -> None:
        """Partition ``a`` from ``b`` (both directions)."""
        self._check_pair(a, b)
        for here, there in ((a, b), (b, a)):
            _ip("-n", self.namespace(here), "link", "set", f"to-{there}", "down")

    def heal(self, a: str, b: str) -> None:
        self._check_pair(a, b)
        self._link_up(a, b)

    def heal_all(self) -> None:
        for a, b in itertools.combinations(self.nodes, 2):
            if self.is_cut(a, b):
                self.heal(a, b)

    def is_cut(self, a: str, b: str) -> bool:
        out = _ip("-n", self.namespace(a), "-o", "link", "show", f"to-{b}", check=False)
        return out.returncode == 0 and "state UP" not in out.stdout and \
            ",UP" not in out.stdout and "<UP" not in out.stdout

    def cut_links(self) -> list[tuple[str, str]]:
        return [(a, b) for a, b in itertools.combinations(self.nodes, 2) if self.is_cut(a, b)]

    def _check_pair(self, a: str, b: str) -> None:
        for node in (a, b):
            if node not in self.nodes:
                raise NetnsError(f"no node {node!r} in this cluster's mesh "
                                 f"(nodes: {', '.join(self.nodes)})")
        if a == b:
            raise NetnsError(f"cannot cut {a} from itself")

    # ------------------------------------------------------------- teardown
    def destroy(self) -> None:
        """Every namespace of the cluster (veths go with them), then the host's routes.
        The host ends are deleted first, by name: a namespace's veths are otherwise
        removed by the kernel a moment after the namespace, with their routes."""
        for node in self.nodes:
            _ip("link", "del", self._host_end(node), check=False)
        destroy_cluster(self.cluster_id)
        _ip("route", "del", "unreachable", f"{BLOCK}.{self.subnet}.0/24", check=False)


def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _used_subnets() -> set[int]:
    out = _ip("route", "show", "type", "unreachable", check=False).stdout
    return {int(m.group(1)) for m in re.finditer(rf"{re.escape(BLOCK)}\.(\d+)\.0/24", out)}


def leftovers(cluster_id: str | None = None) -> list[str]:
    """The project's namespaces still present (of one cluster, or all)."""
    prefix = PREFIX + (f"{cluster_id}-" if cluster_id else "")
    return [n for n in _namespaces() if n.startswith(prefix)]


def destroy_cluster(cluster_id: str) -> int:
    """Delete every namespace of ``cluster_id``; returns how many were removed."""
    removed = 0
    for ns in leftovers(cluster_id):
        if _ip("netns", "delete", ns, check=False).returncode == 0:
            removed += 1
    return removed
