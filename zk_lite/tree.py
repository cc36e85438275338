"""The data tree: znodes, stats, ACLs, ephemerals and the txns that change them (pure).

Rules (ZK_PROTOCOL.md §6):
* A txn (a named record of ``zk_lite.txn``: Create, Delete, SetData, SetAcl, Multi,
  CreateSession, CloseSession) is applied under one ``(zxid, time_ms)``; applying the
  same txns in the same order to the same tree always gives the same tree.
* Validation (error codes, check order) is the core's job; ``apply`` assumes a valid txn.
* cversion is derived: the node stores ``cc``, the number of child *creations*, and
  reports ``2*cc - numChildren`` (§6.3). The sequence suffix is ``"%010d" % cc``.
* ``apply`` appends the watch triggers it causes, in ZooKeeper's order, to ``events``
  as ``(event_type, path, acl_of_node_that_guards_it)``.
"""
from __future__ import annotations

import base64
import hashlib
import ipaddress
import re

from . import errors
from . import txn

# Permission bits (ZooDefs.Perms)
READ, WRITE, CREATE, DELETE, ADMIN = 1, 2, 4, 8, 16
ALL = 31

OPEN_ACL = ((ALL, "world", "anyone"),)
READ_ACL = ((READ, "world", "anyone"),)

# Event types (Watcher.Event.EventType)
NODE_CREATED, NODE_DELETED, NODE_DATA_CHANGED, NODE_CHILDREN_CHANGED = 1, 2, 3, 4

# Stored ephemeralOwner markers (§6.5); both are reported as 0.
CONTAINER_OWNER = -0x8000000000000000
TTL_MARK = -0x0100000000000000  # top byte 0xFF as a signed long

SPECIAL_PATHS = frozenset({"/", "/zookeeper", "/zookeeper/quota", "/zookeeper/config"})

_BAD_CHARS = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\uf8ff\ufff0-\uffff\U00010000-\U0010ffff]")


def valid_path(path) -> bool:
    """ZooKeeper's PathUtils.validatePath (§6.4)."""
    if not path or path[0] != "/":
        return False
    if len(path) == 1:
        return True
    if path[-1] == "/" or "//" in path:
        return False
    if "/." in path:
        for part in path.split("/"):
            if part == "." or part == "..":
                return False
    return _BAD_CHARS.search(path) is None


def parent_of(path: str) -> str:
    i = path.rfind("/")
    return path[:i] if i > 0 else "/"


def is_ephemeral_owner(owner: int) -> bool:
    return owner > 0  # session ids are positive; markers are negative


class Node:
    __slots__ = ("data", "acl", "czxid", "mzxid", "ctime", "mtime", "version", "cc",
                 "aversion", "owner", "pzxid", "children")

    def __init__(self, data, acl, czxid, mzxid, ctime, mtime, version, cc, aversion,
                 owner, pzxid, children=None):
        self.data = data
        self.acl = acl
        self.czxid = czxid
        self.mzxid = mzxid
        self.ctime = ctime
        self.mtime = mtime
        self.version = version
        self.cc = cc
        self.aversion = aversion
        self.owner = owner
        self.pzxid = pzxid
        self.children = set() if children is None else children

    def copy(self) -> "Node":
        return Node(self.data, self.acl, self.czxid, self.mzxid, self.ctime, self.mtime,
                    self.version, self.cc, self.aversion, self.owner, self.pzxid,
                    set(self.children))

    def stat(self) -> tuple:
        n = len(self.children)
        data = self.data
        owner = self.owner
        return (self.czxid, self.mzxid, self.ctime, self.mtime, self.version,
                _int32(2 * self.cc - n), self.aversion, owner if owner > 0 else 0,
                len(data) if data else 0, n, self.pzxid)


def _int32(v: int) -> int:
    return ((v + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def sequence_suffix(cc: int) -> str:
    return "%010d" % _int32(cc)


# --------------------------------------------------------------------------- ACLs

def digest(user_password: str) -> str:
    """``user:base64(sha1(user:password))``: the digest scheme's id (kazoo's make_digest)."""
    user = user_password.split(":", 1)[0]
    sha = hashlib.sha1(user_password.encode("utf-8")).digest()
    return f"{user}:{base64.b64encode(sha).decode('ascii')}"


def _valid_digest_id(ident) -> bool:
    if not ident:
        return False
    parts = ident.split(":")
    while parts and parts[-1] == "":  # Java's split drops trailing empty strings
        parts.pop()
    return len(parts) == 2


def _ip_network(ident):
    """An ``a.b.c.d`` or ``a.b.c.d/bits`` ACL id (ZooKeeper 3.8 rejects IPv6 ids)."""
    try:
        return ipaddress.IPv4Network(ident, strict=False)
    except (ValueError, TypeError):
        return None


def _ip_matches(acl_id: str, peer: str) -> bool:
    net = _ip_network(acl_id)
    if net is None:
        return False
    try:
        return ipaddress.ip_address(peer) in net
    except ValueError:
        return False


def check_acl(acl, perm: int, auth_ids) -> bool:
    """ZooKeeperServer.checkACL: does any ACL entry grant ``perm`` to these ids?"""
    if not acl:
        return True
    for scheme, _ in auth_ids:
        if scheme == "super":
            return True
    for perms, scheme, ident in acl:
        if not perms & perm:
            continue
        if scheme == "world":
            if ident == "anyone":
                return True
            continue
        for a_scheme, a_id in auth_ids:
            if a_scheme != scheme:
                continue
            if scheme == "ip":
                if _ip_matches(ident, a_id):
                    return True
            elif a_id == ident:
                return True
    return False


def fixup_acl(acl, auth_ids) -> tuple:
    """Dedupe, validate and expand ``auth`` entries (§6.6); raises ZkError(INVALIDACL)."""
    if not acl:
        raise errors.ZkError(errors.INVALIDACL)
    seen = []
    for entry in acl:
        entry = (entry[0], entry[1], entry[2])
        if entry not in seen:
            seen.append(entry)
    out = []
    for perms, scheme, ident in seen:
        if scheme == "world":
            if ident != "anyone":
                raise errors.ZkError(errors.INVALIDACL)
            out.append((perms, scheme, ident))
        elif scheme == "auth":
            added = False
            for a_scheme, a_id in auth_ids:
                if a_scheme == "digest":
                    out.append((perms, a_scheme, a_id))
                    added = True
            if not added:
                raise errors.ZkError(errors.INVALIDACL)
        elif scheme == "digest":
            if not _valid_digest_id(ident):
                raise errors.ZkError(errors.INVALIDACL)
            out.append((perms, scheme, ident))
        elif scheme == "ip":
            if _ip_network(ident) is None:
                raise errors.ZkError(errors.INVALIDACL)
            out.append((perms, scheme, ident))
        else:
            raise errors.ZkError(errors.INVALIDACL)
    result = tuple(out)
    return OPEN_ACL if result == OPEN_ACL else result


# --------------------------------------------------------------------------- the tree

class Tree:
    """All durable state: znodes, sessions (id -> (passwd, timeout)) and the last zxid."""

    def __init__(self):
        self.zxid = 0
        self.nodes: dict[str, Node] = {}
        self.sessions: dict[int, tuple[bytes, int]] = {}
        self.ephemerals: dict[int, set[str]] = {}
        self.containers: set[str] = set()
        root = Node(b"", OPEN_ACL, 0, 0, 0, 0, 0, 0, 0, 0, 0, {"zookeeper"})
        zk = Node(b"", OPEN_ACL, 0, 0, 0, 0, 0, 0, 0, 0, 0, {"quota", "config"})
        self.nodes["/"] = root
        self.nodes["/zookeeper"] = zk
        self.nodes["/zookeeper/quota"] = Node(b"", OPEN_ACL, 0, 0, 0, 0, 0, 0, 0, 0, 0)
        self.nodes["/zookeeper/config"] = Node(b"", READ_ACL, 0, 0, 0, 0, 0, 0, -1, 0, 0)

    # -- queries
    def get(self, path: str) -> Node | None:
        return self.nodes.get(path)

    def count_descendants(self, path: str) -> int:
        if path == "/":
            return len(self.nodes) - 1
        prefix = path + "/"
        return sum(1 for p in self.nodes if p.startswith(prefix))

    # -- txns
    def apply(self, zxid: int, time_ms: int, op: txn.Txn, events: list, undo=None) -> None:
        kind = type(op)
        if kind is txn.Create:
            self._create(zxid, time_ms, op.path, op.data, op.acl, op.owner, events, undo)
        elif kind is txn.Delete:
            self._delete(zxid, op.path, events, undo)
        elif kind is txn.SetData:
            node = self.nodes[op.path]
            if undo is not None:
                undo.append((op.path, node.copy()))
            node.data = op.data
            node.version = _int32(node.version + 1)
            node.mzxid = zxid
            node.mtime = time_ms
            events.append((NODE_DATA_CHANGED, op.path, node.acl))
        elif kind is txn.SetAcl:
            node = self.nodes[op.path]
            if undo is not None:
                undo.append((op.path, node.copy()))
            node.acl = op.acl
            node.aversion = _int32(node.aversion + 1)
        elif kind is txn.Multi:
            for sub in op.ops:
                self.apply(zxid, time_ms, sub, events, undo)
        elif kind is txn.CreateSession:
            self.sessions[op.sid] = (op.passwd, op.timeout_ms)
        elif kind is txn.CloseSession:
            sid = op.sid
            for path in sorted(self.ephemerals.get(sid, ())):
                self._delete(zxid, path, events, None)
            self.ephemerals.pop(sid, None)
            self.sessions.pop(sid, None)
        else:
            raise AssertionError(f"unknown txn {op!r}")
        if zxid > self.zxid:
            self.zxid = zxid

    def _create(self, zxid, time_ms, path, data, acl, owner, events, undo) -> None:
        ppath = parent_of(path)
        parent = self.nodes[ppath]
        assert path not in self.nodes, path
        if undo is not None:
            undo.append((ppath, parent.copy()))
            undo.append((path, None))
        if acl == OPEN_ACL:
            acl = OPEN_ACL  # share one object; lets hot paths skip the ACL check
        self.nodes[path] = Node(data, acl, zxid, zxid, time_ms, time_ms, 0, 0, 0, owner, zxid)
        parent.children.add(path[len(ppath) + 1:] if ppath != "/" else path[1:])
        parent.cc += 1
        parent.pzxid = zxid
        if owner > 0:
            self.ephemerals.setdefault(owner, set()).add(path)
            if undo is not None:
                undo.append(("eph-", owner, path))
        elif owner == CONTAINER_OWNER:
            self.containers.add(path)
        events.append((NODE_CREATED, path, acl))
        events.append((NODE_CHILDREN_CHANGED, ppath, parent.acl))

    def _delete(self, zxid, path, events, undo) -> None:
        ppath = parent_of(path)
        parent = self.nodes[ppath]
        node = self.nodes.pop(path)
        if undo is not None:
            undo.append((ppath, parent.copy()))
            undo.append((path, node))
        parent.children.discard(path[len(ppath) + 1:] if ppath != "/" else path[1:])
        if zxid > parent.pzxid:
            parent.pzxid = zxid
        owner = node.owner
        if owner > 0:
            paths = self.ephemerals.get(owner)
            if paths is not None:
                paths.discard(path)
                if undo is not None:
                    undo.append(("eph+", owner, path))
        elif owner == CONTAINER_OWNER:
            self.containers.discard(path)
        events.append((NODE_DELETED, path, node.acl))
        events.append((NODE_CHILDREN_CHANGED, ppath, parent.acl))

    def rollback(self, undo: list) -> None:
        """Undo the effects recorded by ``apply(..., undo=undo)``, newest first."""
        for entry in reversed(undo):
            if entry[0] == "eph-":
                self.ephemerals.get(entry[1], set()).discard(entry[2])
            elif entry[0] == "eph+":
                self.ephemerals.setdefault(entry[1], set()).add(entry[2])
            else:
                path, node = entry
                if node is None:
                    removed = self.nodes.pop(path, None)
                    if removed is not None and removed.owner == CONTAINER_OWNER:
                        self.containers.discard(path)
                else:
                    self.nodes[path] = node
                    if node.owner == CONTAINER_OWNER:
                        self.containers.add(path)
        undo.clear()

    def check_invariants(self) -> None:
        """Assert the structural invariants (tests and the fuzzer call this)."""
        ephemerals: dict[int, set[str]] = {}
        containers = set()
        for path, node in self.nodes.items():
            assert max(node.czxid, node.mzxid, node.pzxid) <= self.zxid, path
            if path != "/":
                parent = self.nodes.get(parent_of(path))
                assert parent is not None, f"{path} has no parent"
                assert path.rsplit("/", 1)[1] in parent.children, path
                assert parent.owner <= 0, f"{path} is the child of an ephemeral"
            for child in node.children:
                assert (path.rstrip("/") + "/" + child) in self.nodes, (path, child)
            if node.owner > 0:
                ephemerals.setdefault(node.owner, set()).add(path)
                assert node.owner in self.sessions, f"{path} outlived session {node.owner:#x}"
            elif node.owner == CONTAINER_OWNER:
                containers.add(path)
        assert {k: v for k, v in self.ephemerals.items() if v} == ephemerals
        assert self.containers == containers

    # -- snapshots (builtin types only, for marshal)
    def to_snapshot(self) -> tuple:
        nodes = [(p, n.data, n.acl, n.czxid, n.mzxid, n.ctime, n.mtime, n.version, n.cc,
                  n.aversion, n.owner, n.pzxid) for p, n in self.nodes.items()]
        return (1, self.zxid, nodes, list(self.sessions.items()))

    @classmethod
    def from_snapshot(cls, snap) -> "Tree":
        version, zxid, nodes, sessions = snap
        assert version == 1, version
        tree = cls()
        tree.nodes = {}
        tree.zxid = zxid
        for p, *fields in nodes:
            node = tree.nodes[p] = Node(*fields)
            if node.acl == OPEN_ACL:
                node.acl = OPEN_ACL
        for p, node in tree.nodes.items():
            if p != "/":
                ppath = parent_of(p)
                tree.nodes[ppath].children.add(p[len(ppath) + 1:] if ppath != "/" else p[1:])
            if node.owner > 0:
                tree.ephemerals.setdefault(node.owner, set()).add(p)
            elif node.owner == CONTAINER_OWNER:
                tree.containers.add(p)
        tree.sessions = {sid: (passwd, timeout) for sid, (passwd, timeout) in sessions}
        return tree
