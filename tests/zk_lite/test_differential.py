"""The same seeded random kazoo session against zk_lite and a real ZooKeeper: identical traces.

A trace holds each request's result and the watch events a second client (watching
every path, re-arming after each event) received because of it.

Every result is normalised so that only what ZooKeeper defines remains: stat fields as
they are, except zxids (replaced by the order in which the trace first shows them;
ZooKeeper also spends zxids on failed writes, which no stat shows) and times (dropped).
A failing seed is printed; ``ZK_DIFF_SEEDS=1,2,3`` replays chosen ones.
"""
from __future__ import annotations

import os
import random
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.protocol.states import ZnodeStat
from kazoo.security import (
    ACL,
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    make_acl,
    make_digest_acl,
)

from .conftest import CONNECT_TIMEOUT_S, DEFAULT_TICK_TIME_MS
from .servers import KINDS, missing_reason
from .util import drain_callbacks

pytestmark = pytest.mark.process

SEEDS = [int(s) for s in os.environ.get("ZK_DIFF_SEEDS", "1,2,3,4").split(",")]
OPS_PER_SEED = 250
PATHS = ["/a", "/b", "/a/x", "/a/y", "/b/x", "/a/x/deep", "/a/s-", "/b/s-"]


class Normaliser:
    def __init__(self):
        self.zxids: dict[int, int] = {0: 0}

    def zxid(self, value: int) -> int:
        return self.zxids.setdefault(value, len(self.zxids))

    def __call__(self, value):
        if isinstance(value, ZnodeStat):
            return ("stat", self.zxid(value.czxid), self.zxid(value.mzxid), self.zxid(value.pzxid),
                    value.version, value.cversion, value.aversion, value.ephemeralOwner != 0,
                    value.dataLength, value.numChildren)
        if isinstance(value, ACL):
            return ("acl", value.perms, value.id.scheme, value.id.id)
        if isinstance(value, KazooException):
            return ("error", type(value).__name__)
        if isinstance(value, (list, tuple)):
            items = [self(v) for v in value]
            unordered = isinstance(value, list) and all(isinstance(v, (str, ACL)) for v in value)
            return ("list", *(sorted(items, key=repr) if unordered else items))
        return value


AUTH = [("digest", "alice:secret")]  # both clients: every ACL below leaves them READ
ACL_CHOICES = {
    "open": OPEN_ACL_UNSAFE,
    "world-read": READ_ACL_UNSAFE,
    "alice-all": [make_digest_acl("alice", "secret", all=True)],
    "alice-read-write": [make_digest_acl("alice", "secret", read=True, write=True)],
    "creator": CREATOR_ALL_ACL,
    "alice-admin+world-read": [make_digest_acl("alice", "secret", admin=True),
                               make_acl("world", "anyone", read=True)],
}


def random_op(rng: random.Random):
    """(description, function of a client) for one random request."""
    path = rng.choice(PATHS)
    data = rng.choice([b"", b"x", b"hello", None])
    version = rng.choice([-1, -1, -1, 0, 1, 2])
    kind = rng.choices(["create", "delete", "set", "get", "children", "exists", "transaction",
                        "set_acls", "get_acls"], weights=[3, 3, 2, 1, 1, 1, 2, 1, 1])[0]
    if kind == "create":
        ephemeral, sequence = rng.random() < 0.2, path.endswith("-") or rng.random() < 0.1
        return (f"create {path} {data} e={ephemeral} s={sequence}",
                lambda c: c.create(path, data, ephemeral=ephemeral, sequence=sequence, include_data=True))
    if kind == "delete":
        return f"delete {path} v={version}", lambda c: c.delete(path, version=version)
    if kind == "set":
        return f"set {path} {data} v={version}", lambda c: c.set(path, data or b"", version=version)
    if kind == "get":
        return f"get {path}", lambda c: c.get(path)
    if kind == "children":
        return f"children {path}", lambda c: c.get_children(path, include_data=True)
    if kind == "exists":
        return f"exists {path}", lambda c: c.exists(path)
    if kind == "set_acls":
        name = rng.choice(sorted(ACL_CHOICES))
        return f"set_acls {path} {name} v={version}", lambda c: c.set_acls(path, ACL_CHOICES[name], version)
    if kind == "get_acls":
        return f"get_acls {path}", lambda c: c.get_acls(path)
    subops = [(rng.choice(["create", "delete", "set", "check"]), rng.choice(PATHS), rng.choice([-1, 0, 1]))
              for _ in range(rng.randrange(1, 4))]

    def transaction(client):
        t = client.transaction()
        for op, p, v in subops:
            if op == "create":
                t.create(p, b"t", sequence=p.endswith("-"))
            elif op == "delete":
                t.delete(p, version=v)
            elif op == "set":
                t.set_data(p, b"t", version=v)
            else:
                t.check(p, v)
        return t.commit()

    return f"transaction {subops}", transaction


WATCHED_PATHS = [p for p in PATHS if not p.endswith("-")]


class WatchRecorder:
    """A second client keeping a data and a child watch armed on every watched path."""

    def __init__(self, client: KazooClient):
        self.client = client
        self.events: list[tuple] = []
        self.armed: set[tuple[str, str]] = set()
        # One stable callback per (table, path): kazoo keeps watchers in sets.
        self.callbacks = {(table, path): self._callback(table, path)
                          for table in ("data", "child") for path in WATCHED_PATHS}

    def _callback(self, table: str, path: str):
        def on_event(event):
            self.events.append((table, event.type, event.path))
            self.armed.discard((table, path))
        return on_event

    def arm(self) -> None:
        for path in WATCHED_PATHS:
            if ("data", path) not in self.armed:
                self.client.exists(path, watch=self.callbacks[("data", path)])
                self.armed.add(("data", path))
            if ("child", path) not in self.armed:
                try:
                    self.client.get_children(path, watch=self.callbacks[("child", path)])
                    self.armed.add(("child", path))
                except NoNodeError:
                    pass  # a failed read registers nothing

    def take(self) -> list[tuple]:
        drain_callbacks(self.client)
        events, self.events = sorted(self.events), []
        return events


def trace(hosts: str, seed: int) -> list:
    rng = random.Random(seed)
    normalise = Normaliser()
    client = KazooClient(hosts=hosts, timeout=5.0, auth_data=AUTH)
    client.start(timeout=CONNECT_TIMEOUT_S)
    watcher = KazooClient(hosts=hosts, timeout=5.0, auth_data=AUTH)
    watcher.start(timeout=CONNECT_TIMEOUT_S)
    recorder = WatchRecorder(watcher)
    lines = []
    try:
        for _ in range(OPS_PER_SEED):
            recorder.arm()
            description, op = random_op(rng)
            try:
                result = op(client)
            except KazooException as error:
                result = error
            lines.append((description, normalise(result), recorder.take()))
        client.stop()  # the session's ephemerals go, with their watches
        lines.append(("close session", None, recorder.take()))
    finally:
        for each in (client, watcher):
            each.stop()
            each.close()
    return lines


@pytest.fixture
def both_servers(zk_pool):
    for kind in KINDS:
        reason = missing_reason(kind)
        if reason:
            pytest.skip(reason)
    servers = {kind: zk_pool.get(kind, DEFAULT_TICK_TIME_MS) for kind in KINDS}
    namespace = f"/diff_{uuid.uuid4().hex[:12]}"
    for handle in servers.values():
        admin = KazooClient(hosts=handle.hosts)
        admin.start(timeout=CONNECT_TIMEOUT_S)
        try:
            admin.create(namespace)
        finally:
            admin.stop()
            admin.close()
    return {kind: handle.hosts + namespace for kind, handle in servers.items()}


@pytest.mark.parametrize("seed", SEEDS)
def test_random_session_gives_the_same_trace_on_both_servers(both_servers, seed):
    reference = trace(both_servers["zookeeper"], seed)
    ours = trace(both_servers["zk_lite"], seed)
    for step, (expected, got) in enumerate(zip(reference, ours)):
        assert got == expected, (f"seed {seed}, step {step}: {expected[0]}\n"
                                 f" zookeeper: {expected[1:]}\n zk_lite:   {got[1:]}")
    assert len(ours) == len(reference) == OPS_PER_SEED + 1
