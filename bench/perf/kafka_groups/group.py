"""The parent's side of group members run as child processes (``member``, ``kcat -G``,
a node script): start them, follow what each tells, signal them, and wait until a set of
members owns a topic's partitions.

Every member is a ``Member``: its process and, from its output, its current assignment
(``parts``; ``changes``: (when, parts) in the member's clock), every record it read
(``records``: (partition, offset, value, when)), its acknowledged commits (``commits``:
partition -> next offset; ``commit_log``: (when, partition, next offset)), its errors
and whether it closed. The output is ``member``'s JSON lines; kcat's records come as
``-J`` JSON lines and its rebalances as its stderr lines (``% Group G rebalanced ...:
assigned: T [0], T [1]``), timed on arrival.

``owned_by(members, partitions)`` waits until those members' assignments are disjoint,
cover ``partitions`` and (with at least as many partitions as members) none is empty,
and returns when that became true: the latest change among them.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque

from node.waiting import poll_until

STOP_GRACE_S = 20.0
TAIL_LINES = 30
WAIT_INTERVAL_S = 0.005
_KCAT_PARTITION = re.compile(r"(\S+) \[(\d+)\]")


class Member:
    """A group member process and what it has told so far (see the module docstring)."""

    def __init__(self, name: str, argv: list[str], *, fmt: str = "member",
                 env: dict | None = None, topic: str | None = None) -> None:
        assert fmt in ("member", "kcat"), fmt
        self.name = name
        self.argv = argv
        self.fmt = fmt
        self.topic = topic
        self.lock = threading.Lock()
        self.parts: frozenset[int] = frozenset()
        self.changes: list[tuple[float, frozenset[int]]] = []
        self.records: list[tuple[int, int, str | None, float]] = []
        self.commits: dict[int, int] = {}
        self.commit_log: list[tuple[float, int, int]] = []
        self.count = {"n": 0, "first": None, "last": None, "gen": 0}
        self.errors: list[str] = []
        self.storm: list[float] | None = None     # --commit-storm's commit times, ms
        self.ready = False
        self.closed = False
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL, text=True, bufsize=1, env=env,
                                     start_new_session=True)
        self._threads = [threading.Thread(target=self._read, args=(stream, handle),
                                          daemon=True, name=f"{name}-{what}")
                         for stream, handle, what in (
                             (self.proc.stdout, self._stdout, "out"),
                             (self.proc.stderr, self._stderr, "err"))]
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------ reading its output
    def _read(self, stream, handle) -> None:
        for line in stream:
            line = line.rstrip("\n")
            if line:
                handle(line)

    def _stdout(self, line: str) -> None:
        try:
            event = json.loads(line)
        except ValueError:
            self.tail.append(line)
            return
        if self.fmt == "kcat":
            if "partition" in event:
                with self.lock:
                    self.ready = True
                    self.records.append((event["partition"], event["offset"], event["payload"],
                                         time.time()))
            return
        self._event(event)

    def _event(self, event: dict) -> None:
        ev = event.get("ev")
        with self.lock:
            if ev == "assign":
                self._assign(event["t"], frozenset(event["parts"]))
            elif ev == "rec":
                self.records.append((event["p"], event["o"], event.get("v"), event["t"]))
            elif ev == "count":
                self.count = {"n": event["n"], "first": event["first"], "last": event["last"],
                              "gen": event.get("gen", 0)}
            elif ev == "commit":
                self.commits[event["p"]] = max(self.commits.get(event["p"], -1), event["o"])
                self.commit_log.append((event["t"], event["p"], event["o"]))
            elif ev == "storm":
                self.storm = event["ms"]
            elif ev == "error":
                self.errors.append(event["msg"])
            elif ev == "ready":
                self.ready = True
            elif ev == "closed":
                self.closed = True

    def _assign(self, t: float, parts: frozenset[int]) -> None:
        self.parts = parts
        self.changes.append((t, parts))

    def _stderr(self, line: str) -> None:
        self.tail.append(line)
        if self.fmt != "kcat" or "rebalanced" not in line:
            return
        listed = {int(p) for topic, p in _KCAT_PARTITION.findall(line) if topic == self.topic}
        with self.lock:
            self.ready = True
            if "revoked" in line or "incremental unassign" in line:
                self._assign(time.time(), self.parts - listed)
            elif "assigned" in line or "incremental assign" in line:
                eager = "incremental" not in line
                self._assign(time.time(), frozenset(listed) if eager else self.parts | listed)

    # ------------------------------------------------------------ what it told
    def snapshot(self) -> tuple[frozenset[int], float]:
        with self.lock:
            return self.parts, (self.changes[-1][0] if self.changes else 0.0)

    def read(self) -> list[tuple[int, int, str | None, float]]:
        with self.lock:
            return list(self.records)

    def changes_since(self, t: float) -> list[tuple[float, frozenset[int]]]:
        with self.lock:
            return [c for c in self.changes if c[0] >= t]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def running(self) -> bool:
        """True while it runs; a RuntimeError saying how it ended once it exited."""
        if self.alive():
            return True
        raise RuntimeError(f"a member exited: {self.describe()}")

    def describe(self) -> str:
        with self.lock:
            return (f"{self.name} (pid {self.proc.pid}, "
                    f"{'running' if self.alive() else f'exit {self.proc.returncode}'}): "
                    f"parts {sorted(self.parts)}, {len(self.records)} records, "
                    f"errors {self.errors[-3:]}, output {list(self.tail)[-8:]}")

    # ------------------------------------------------------------ signals
    def signal(self, sig: int) -> float:
        """Send ``sig``; returns the time it was sent (time.time())."""
        at = time.time()
        try:
            os.kill(self.proc.pid, sig)
        except ProcessLookupError:
            pass
        return at

    def kill(self) -> float:
        at = self.signal(signal.SIGKILL)
        self.proc.wait()
        return at

    def term(self) -> float:
        return self.signal(signal.SIGTERM)

    def stop(self, grace_s: float = STOP_GRACE_S) -> int:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL; the exit code."""
        if self.alive():
            self.term()
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        for thread in self._threads:
            thread.join(5)
        return self.proc.returncode


def python_member(name: str, client: str, bootstrap: str, group: str, topic: str, *,
                  protocol: str = "classic", session_ms: int = 6000, heartbeat_ms: int = 300,
                  instance_id: str | None = None, commit: str = "none",
                  report: str = "records", assignor: str | None = None,
                  commit_storm: int = 0) -> Member:
    argv = [sys.executable, "-m", "bench.perf.kafka_groups.member", "--client", client,
            "--protocol", protocol, "--bootstrap", bootstrap, "--group", group,
            "--topic", topic, "--session-ms", str(session_ms), "--heartbeat-ms",
            str(heartbeat_ms), "--commit", commit, "--report", report]
    if instance_id:
        argv += ["--instance-id", instance_id]
    if assignor:
        argv += ["--assignor", assignor]
    if commit_storm:
        argv += ["--commit-storm", str(commit_storm)]
    from node.paths import child_env
    return Member(name, argv, topic=topic, env=child_env())


def kcat_member(name: str, bootstrap: str, group: str, topic: str, *, session_ms: int = 6000,
                heartbeat_ms: int = 300, instance_id: str | None = None) -> Member:
    """``kcat -G``: librdkafka's balanced consumer, auto-committing every 100 ms."""
    argv = ["kcat", "-b", bootstrap, "-G", group, "-J", "-u",
            "-X", "auto.offset.reset=earliest", "-X", f"session.timeout.ms={session_ms}",
            "-X", f"heartbeat.interval.ms={heartbeat_ms}", "-X", "enable.auto.commit=true",
            "-X", "auto.commit.interval.ms=100", "-X", "topic.metadata.refresh.interval.ms=2000"]
    if instance_id:
        argv += ["-X", f"group.instance.id={instance_id}"]
    return Member(name, argv + [topic], fmt="kcat", topic=topic)


def stop_all(members) -> None:
    for m in members:
        if m.alive():
            m.term()
    for m in members:
        m.stop()


def owned_by(members: list[Member], partitions, timeout_s: float, what: str = "") -> float:
    """Wait until ``members`` own ``partitions`` between them (disjoint, covering, none
    empty when there are enough partitions); when that became true (members' clock)."""
    wanted = frozenset(partitions)

    def settled():
        dead = [m for m in members if not m.alive()]
        if dead:
            raise AssertionError(f"waiting for {what or 'the members to own the topic'}: "
                                 f"{', '.join(m.describe() for m in dead)} exited")
        views = [m.snapshot() for m in members]
        sets = [parts for parts, _ in views]
        if sum(len(s) for s in sets) != len(wanted) or frozenset().union(*sets) != wanted:
            return None
        if len(wanted) >= len(members) and not all(sets):
            return None
        return max(at for _, at in views) or time.time()

    return poll_until(settled, timeout_s,
                      what or f"{', '.join(m.name for m in members)} to own {sorted(wanted)}",
                      interval_s=WAIT_INTERVAL_S,
                      error=lambda message: AssertionError(
                          message + "; " + " | ".join(m.describe() for m in members)))
