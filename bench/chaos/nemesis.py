"""The nemesis: faults applied to a supervisor cluster (``node.cluster.Cluster``) on a
schedule, each with a start, a duration and a target.

A schedule is a list of faults, Trogdor-style::

    [{"at_ms": 3000, "duration_ms": 2500, "fault": "kill", "target": "leader"}, ...]

Faults (each is healed when its duration ends):

- ``kill``: SIGKILL the target broker, start it again;
- ``pause``: SIGSTOP it, SIGCONT it;
- ``restart``: SIGTERM (a controlled shutdown), start it again;
- ``controller``: ``kill`` aimed at the current controller;
- ``controller-move``: delete /controller, so the brokers elect a controller again
  (nothing to heal: the election is the fault);
- ``coordinator``: SIGKILL zk_lite, start it again;
- ``coordinator-pause``: SIGSTOP zk_lite (longer than a session timeout makes the
  brokers' sessions expire), SIGCONT it;
- ``slow``: the target runs in bursts (SIGSTOP for ``SLOW_STOP_MS``, SIGCONT for
  ``SLOW_RUN_MS``, over and over): a replica that answers, but seconds late (this
  kernel has no netem qdisc to delay packets);
- ``power-failure``: SIGKILL the targets at the same moment, then cut each one's
  segment files back to its recovery point (what had been flushed; the rest was in
  the page cache), start them again when the fault ends;
- ``late-write`` (the ``txn`` workload): a write of an aborted transaction delivered
  again after its abort marker, with its producer's id, epoch and next sequence
  (``bench.chaos.late_write.inject``: KIP-890's gap); tried until one lands or is
  refused, within the fault's duration; nothing to heal;
- ``partition`` (a ``--netns`` cluster only): cut links of the mesh, heal them. Its
  target: ``isolate:X`` (X from everyone), ``X|Y`` (every X from every Y), ``halves``
  (the servers split in two at random) or ``bridge`` (two halves and one node that
  still sees both), where X and Y are ``leader``, ``follower`` (one of them),
  ``followers``, ``controller``, ``broker`` (a broker not on the other side), ``zk``,
  ``random``, ``clients`` (the workload's processes) or a node (``b1``, ``zk``, ``p0``).
  The seed's scenarios: 1 ``follower|leader``, 2 ``leader|followers``, 3
  ``follower|zk``, 4 ``leader|zk``, 5 ``isolate:follower``, 6 ``isolate:leader``,
  7 ``controller|broker``, 8 ``controller|zk``.

Targets for broker faults: a broker id (``power-failure`` also takes ``all`` or a
comma list), ``random``, ``leader`` (of the run's topic's
partition 0 when the fault starts), ``followers`` (its other live replicas, all of them)
or ``controller``. Each fault runs on its own timer, so a given schedule may overlap
faults (pause the followers, then kill the leader: the seeds' acks=1 loss). ``plan``
draws a schedule from a seed: faults one after another, never overlapping, with quiet
gaps between them, ending early enough for the cluster to heal before the run ends; the
same seed gives the same schedule. ``bench.chaos.compose.plan`` draws rounds of
overlapping faults instead (``chaos run --compose``).
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import asdict, dataclass

FAULTS = ("kill", "pause", "restart", "controller", "coordinator", "coordinator-pause",
          "slow", "power-failure", "partition", "controller-move", "late-write")
BROKER_FAULTS = ("kill", "pause", "restart", "slow", "power-failure")
TARGETS = ("random", "leader", "followers", "controller")
# What a drawn partition cuts: the seed's scenarios 1-8, and Jepsen's shapes.
PARTITION_TARGETS = ("follower|leader", "leader|followers", "follower|zk", "leader|zk",
                     "isolate:follower", "isolate:leader", "controller|broker",
                     "controller|zk", "halves", "bridge", "isolate:zk")
SLOW_STOP_MS = 900
SLOW_RUN_MS = 100
FAULT_MS = (1000, 4000)          # a drawn fault lasts this long
GAP_MS = (1500, 4000)            # and is followed by this much quiet
FIRST_AT_MS = 2000
HEAL_TAIL_MS = 4000              # no fault starts this close to the end

log = logging.getLogger("bench.chaos.nemesis")


class ScheduleError(ValueError):
    """A schedule that cannot be run: one clear line."""


@dataclass(frozen=True)
class Planned:
    at_ms: int
    duration_ms: int
    fault: str
    target: str = "random"


@dataclass
class Applied:
    """A fault as it happened: monotonic ns, and the process it hit."""

    fault: str
    target: str
    start_ns: int
    end_ns: int = 0
    error: str | None = None
    links: tuple = ()     # partition: the (node, node) pairs cut
    detail: str = ""      # power-failure: records each broker lost


def plan(seed: int, faults: list[str], duration_s: float,
         targets: tuple[str, ...] = ("random", "leader")) -> list[Planned]:
    check_faults(faults)
    rng = random.Random(seed)
    out, at = [], FIRST_AT_MS
    end = int(duration_s * 1000) - HEAL_TAIL_MS
    while True:
        length = rng.randint(*FAULT_MS)
        if at + length > end:
            return out
        fault = rng.choice(faults)
        if fault == "partition":
            target = rng.choice(PARTITION_TARGETS)
        elif fault in BROKER_FAULTS:
            target = rng.choice(targets)
        elif fault == "late-write":
            target = "random"
        else:
            target = "zk" if fault.startswith("coordinator") else "controller"
        out.append(Planned(at, length, fault, target))
        at += length + rng.randint(*GAP_MS)


def check_faults(faults) -> None:
    unknown = [f for f in faults if f not in FAULTS]
    if unknown or not faults:
        raise ScheduleError(f"unknown fault(s) {', '.join(unknown) or '(none)'}; "
                            f"choose from {', '.join(FAULTS)}")


def load(entries: list) -> list[Planned]:
    """A schedule from its JSON form (validated)."""
    if not isinstance(entries, list):
        raise ScheduleError("a schedule is a JSON list of faults")
    out = []
    for i, entry in enumerate(entries):
        try:
            target = entry.get("target", entry.get("targets", "random"))  # Trogdor: targets
            if isinstance(target, list):
                target = ",".join(str(t) for t in target)
            item = Planned(int(entry["at_ms"]), int(entry["duration_ms"]), str(entry["fault"]),
                           str(target))
        except (KeyError, TypeError, ValueError) as e:
            raise ScheduleError(f"fault {i}: needs at_ms, duration_ms, fault: {e}") from None
        check_faults([item.fault])
        if item.at_ms < 0 or item.duration_ms < 0:
            raise ScheduleError(f"fault {i}: negative time")
        out.append(item)
    return sorted(out, key=lambda p: p.at_ms)


def dump(schedule: list[Planned]) -> list[dict]:
    return [asdict(p) for p in schedule]


class Nemesis:
    """Runs a schedule in a thread against ``cluster``; ``applied`` is what happened."""

    def __init__(self, cluster, schedule: list[Planned], topic: str, seed: int = 0) -> None:
        self.cluster = cluster
        self.schedule = schedule
        self.topic = topic
        self.rng = random.Random(seed ^ 0x5EED)
        self.applied: list[Applied] = []
        self.active: list[Applied] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        # Overlapping faults may aim at one broker: a power cut's kill-and-cut and any
        # fault's restart of a process never interleave.
        self._acting = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.started_ns = 0

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        self._threads = [threading.Thread(target=self._one, args=(planned,),
                                          name=f"nemesis-{i}", daemon=True)
                         for i, planned in enumerate(self.schedule)]
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Heal what is active and wait for every fault's thread."""
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _one(self, planned: Planned) -> None:
        wait_s = (self.started_ns + planned.at_ms * 1_000_000 - time.monotonic_ns()) / 1e9
        if wait_s > 0 and self._stop.wait(wait_s):
            return
        if self._stop.is_set():
            return
        applied = self._apply(planned)
        if applied is None:
            return
        if planned.fault == "slow":
            self._slow(applied, planned.duration_ms / 1000)
        else:
            self._stop.wait(planned.duration_ms / 1000)
        self._heal(applied)

    def _slow(self, applied: Applied, duration_s: float) -> None:
        """Duty-cycle the targets (they were stopped by _apply) until the fault ends."""
        end = time.monotonic() + duration_s
        while not self._stop.is_set():
            if self._stop.wait(min(SLOW_STOP_MS / 1000, max(0.0, end - time.monotonic()))):
                return
            if time.monotonic() >= end:
                return
            self._signal_all(applied, "CONT")
            if self._stop.wait(SLOW_RUN_MS / 1000) or time.monotonic() >= end:
                return
            self._signal_all(applied, "STOP")

    def _signal_all(self, applied: Applied, signal: str) -> None:
        for target in applied.target.split(","):
            try:
                self.cluster.kill(int(target), signal)
            except Exception as e:  # killed by an overlapping fault: nothing to slow
                log.debug("nemesis: %s to %s: %s", signal, target, e)

    def _resolve(self, planned: Planned) -> list[str]:
        if planned.fault.startswith("coordinator"):
            return ["zk"]
        if planned.fault == "power-failure" and (
                planned.target == "all" or "," in planned.target):
            if planned.target == "all":
                return [str(b) for b in self.cluster.broker_ids
                        if self.cluster.process(b).pid() is not None]
            return [t.strip() for t in planned.target.split(",") if t.strip()]
        target = "controller" if planned.fault == "controller" else planned.target
        live = [b for b in self.cluster.broker_ids
                if self.cluster.process(b).state() == "alive"]
        if target == "controller":
            controller = self.cluster.controller_id()
            return [str(controller if controller is not None else self.rng.choice(live))]
        if target in ("leader", "followers"):
            state = self.cluster.partition_state(self.topic, 0)
            if state is not None and state.leader >= 0:
                if target == "leader":
                    return [str(state.leader)]
                return [str(b) for b in state.isr if b != state.leader and b in live]
            target = "random"
        if target == "random":
            return [str(self.rng.choice(live))]
        return [target]

    def _apply(self, planned: Planned) -> Applied | None:
        if planned.fault == "partition":
            return self._apply_partition(planned)
        if planned.fault == "power-failure":
            with self._acting:
                return self._apply_power_failure(planned)
        if planned.fault == "controller-move":
            return self._apply_controller_move(planned)
        if planned.fault == "late-write":
            return self._apply_late_write(planned)
        try:
            targets = self._resolve(planned)
        except Exception as e:  # the coordinator may be away: skip this fault
            log.warning("nemesis: no target for %s: %s", planned.fault, e)
            return None
        if not targets:
            return None
        applied = Applied(planned.fault, ",".join(targets), time.monotonic_ns())
        for target in targets:
            ident = "zk" if target == "zk" else int(target)
            try:
                if planned.fault in ("kill", "controller", "coordinator"):
                    self.cluster.kill(ident, "KILL")
                elif planned.fault in ("pause", "coordinator-pause", "slow"):
                    self.cluster.kill(ident, "STOP")
                elif planned.fault == "restart":
                    self.cluster.stop(ident)
            except Exception as e:
                applied.error = str(e)
                log.warning("nemesis: %s of %s failed: %s", planned.fault, target, e)
        with self._lock:
            self.applied.append(applied)
            self.active.append(applied)
        return applied

    def _apply_power_failure(self, planned: Planned) -> Applied | None:
        try:
            targets = [int(t) for t in self._resolve(planned)]
        except Exception as e:
            log.warning("nemesis: no target for %s: %s", planned.fault, e)
            return None
        applied = Applied(planned.fault, ",".join(map(str, targets)), time.monotonic_ns())
        # Every target loses power at the same moment: signal them all, then wait.
        processes = [self.cluster.process(b) for b in targets]
        for process in processes:
            process.signal(9)
        lost = []
        for broker_id, process in zip(targets, processes):
            try:
                process.kill_now()
                cut = self.cluster.lose_unflushed(broker_id)
                lost.append(f"broker {broker_id} lost " + (", ".join(
                    f"{n} of {tp}" for tp, n in sorted(cut.items())) or "nothing"))
            except Exception as e:
                applied.error = (applied.error or "") + f"{broker_id}: {e}; "
                log.warning("nemesis: power failure of %s: %s", broker_id, e)
        applied.detail = "; ".join(lost)
        with self._lock:
            self.applied.append(applied)
            self.active.append(applied)
        return applied

    def _apply_controller_move(self, planned: Planned) -> Applied | None:
        try:
            deposed = self.cluster.move_controller()
        except Exception as e:  # the coordinator may be away: skip this fault
            log.warning("nemesis: no controller to move: %s", e)
            return None
        applied = Applied(planned.fault, "controller", time.monotonic_ns(),
                          detail=f"deposed {deposed}")
        with self._lock:
            self.applied.append(applied)
            self.active.append(applied)
        return applied

    def _apply_late_write(self, planned: Planned) -> Applied:
        from bench.chaos.late_write import inject
        from node.client import Admin
        applied = Applied(planned.fault, self.topic, time.monotonic_ns())
        try:
            with Admin(self.cluster.bootstrap_servers) as admin:
                partitions = [m.partition for m in admin.describe_topics([self.topic])[
                    self.topic]]
                applied.target, applied.detail = inject(
                    admin, self.topic, partitions, self.rng,
                    time.monotonic() + planned.duration_ms / 1000, self._stop,
                    time.monotonic)
        except Exception as e:  # the cluster in another fault's grip: say so
            applied.error = str(e)
            log.warning("nemesis: late-write: %s", e)
        with self._lock:
            self.applied.append(applied)
            self.active.append(applied)
        return applied

    # ------------------------------------------------------------- partitions
    def _nodes(self, token: str, other_side: set[str]) -> list[str]:
        """The mesh nodes a partition token names (see the module docstring)."""
        mesh = self.cluster.mesh
        brokers = [f"b{b}" for b in self.cluster.broker_ids]
        if token in ("leader", "follower", "followers"):
            state = self.cluster.partition_state(self.topic, 0)
            if state is None or state.leader < 0:
                raise ValueError(f"{self.topic}-0 has no leader now")
            if token == "leader":
                return [f"b{state.leader}"]
            followers = [f"b{b}" for b in state.isr if b != state.leader] or \
                [b for b in brokers if b != f"b{state.leader}"]
            return followers if token == "followers" else [self.rng.choice(followers)]
        if token == "controller":
            controller = self.cluster.controller_id()
            if controller is None:
                raise ValueError("no controller now")
            return [f"b{controller}"]
        if token == "broker":
            return [self.rng.choice([b for b in brokers if b not in other_side])]
        if token == "random":
            return [self.rng.choice(brokers)]
        if token == "clients":
            return [n for n in mesh.nodes if n[0] in "pc"]
        if token.isdigit():
            token = f"b{token}"
        if token not in mesh.nodes:
            raise ValueError(f"no node {token!r} (nodes: {', '.join(mesh.nodes)})")
        return [token]

    def links_of(self, target: str) -> list[tuple[str, str]]:
        """The (node, node) pairs a partition target cuts, resolved against now."""
        mesh = self.cluster.mesh
        servers = [n for n in mesh.nodes if n == "zk" or n.startswith("b")]
        if target.startswith("isolate:"):
            alone = self._nodes(target.split(":", 1)[1], set())
            return [(a, n) for a in alone for n in mesh.nodes if n not in alone]
        if target in ("halves", "bridge"):
            shuffled = servers[:]
            self.rng.shuffle(shuffled)
            if target == "bridge":
                shuffled.pop()  # the bridge keeps every link: it is on neither side
            half = len(shuffled) // 2
            left, right = shuffled[:half], shuffled[half:]
            return [(a, b) for a in left for b in right]
        if "|" in target:
            a_token, b_token = target.split("|", 1)
            side_a = self._nodes(a_token, set())
            side_b = self._nodes(b_token, set(side_a))
            return [(a, b) for a in side_a for b in side_b if a != b]
        raise ValueError(f"partition target {target!r}: isolate:X, X|Y, halves or bridge")

    def _apply_partition(self, planned: Planned) -> Applied | None:
        if self.cluster.mesh is None:
            log.warning("nemesis: partition needs a --netns cluster; skipped")
            return None
        try:
            links = self.links_of(planned.target)
        except Exception as e:
            log.warning("nemesis: no target for partition %s: %s", planned.target, e)
            return None
        applied = Applied("partition", planned.target, time.monotonic_ns(),
                          links=tuple(links))
        applied.detail = " ".join(f"{a}|{b}" for a, b in links)
        for a, b in links:
            try:
                self.cluster.mesh.cut(a, b)
            except Exception as e:
                applied.error = str(e)
                log.warning("nemesis: cutting %s|%s failed: %s", a, b, e)
        with self._lock:
            self.applied.append(applied)
            self.active.append(applied)
        return applied

    def _heal(self, applied: Applied) -> None:
        if applied.fault == "partition":
            with self._lock:  # a link another active partition also cuts stays cut
                still = {frozenset(p) for a in self.active if a is not applied
                         for p in a.links}
            for a, b in applied.links:
                if frozenset((a, b)) not in still:
                    try:
                        self.cluster.mesh.heal(a, b)
                    except Exception as e:
                        applied.error = (applied.error or "") + f"; heal: {e}"
            applied.end_ns = time.monotonic_ns()
            with self._lock:
                self.active.remove(applied)
            return
        if applied.fault in ("controller-move", "late-write"):
            self._healed(applied)
            return
        with self._acting:
            self._heal_processes(applied)
        self._healed(applied)

    def _healed(self, applied: Applied) -> None:
        applied.end_ns = time.monotonic_ns()
        with self._lock:
            self.active.remove(applied)

    def _heal_processes(self, applied: Applied) -> None:
        for target in applied.target.split(","):
            ident = "zk" if target == "zk" else int(target)
            try:
                if applied.fault in ("pause", "coordinator-pause", "slow"):
                    self.cluster.kill(ident, "CONT")
                else:
                    self.cluster.start(ident, wait=False)
            except Exception as e:
                applied.error = (applied.error or "") + f"; heal: {e}"
                log.warning("nemesis: healing %s of %s failed: %s", applied.fault,
                            target, e)

    def heal_all(self) -> None:
        """After the run: every process running again (resume the stopped, start the
        dead) and every link of the mesh up."""
        if self.cluster.mesh is not None:
            self.cluster.mesh.heal_all()
        for ident in ["zk", *self.cluster.broker_ids]:
            process = self.cluster.process(ident)
            state = process.state()
            if state == "stopped":
                self.cluster.kill(ident, "CONT")
            elif process.pid() is None:
                self.cluster.start(ident, wait=False)
