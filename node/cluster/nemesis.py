"""The nemesis: faults applied to a supervisor cluster (``node.cluster.Cluster``) on a
schedule, each with a start, a duration and a target.

A schedule is a list of faults, Trogdor-style::

    [{"at_ms": 3000, "duration_ms": 2500, "fault": "kill", "target": "leader"}, ...]

Faults (each is healed when its duration ends):

- ``kill``: SIGKILL the target broker, start it again;
- ``pause``: SIGSTOP it, SIGCONT it;
- ``restart``: SIGTERM (a controlled shutdown), start it again;
- ``controller``: ``kill`` aimed at the current controller;
- ``coordinator``: SIGKILL zk_lite, start it again;
- ``coordinator-pause``: SIGSTOP zk_lite (longer than a session timeout makes the
  brokers' sessions expire), SIGCONT it.

Targets for broker faults: a broker id, ``random``, ``leader`` (of the run's topic's
partition 0 when the fault starts), ``followers`` (its other live replicas, all of them)
or ``controller``. Each fault runs on its own timer, so a given schedule may overlap
faults (pause the followers, then kill the leader: the seeds' acks=1 loss). ``plan``
draws a schedule from a seed: faults one after another, never overlapping, with quiet
gaps between them, ending early enough for the cluster to heal before the run ends; the
same seed gives the same schedule.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import asdict, dataclass

FAULTS = ("kill", "pause", "restart", "controller", "coordinator", "coordinator-pause")
BROKER_FAULTS = ("kill", "pause", "restart")
TARGETS = ("random", "leader", "followers", "controller")
FAULT_MS = (1000, 4000)          # a drawn fault lasts this long
GAP_MS = (1500, 4000)            # and is followed by this much quiet
FIRST_AT_MS = 2000
HEAL_TAIL_MS = 4000              # no fault starts this close to the end

log = logging.getLogger("node.cluster.nemesis")


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
        target = rng.choice(targets) if fault in BROKER_FAULTS else \
            ("zk" if fault.startswith("coordinator") else "controller")
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
            item = Planned(int(entry["at_ms"]), int(entry["duration_ms"]), str(entry["fault"]),
                           str(entry.get("target", "random")))
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
        self._stop.wait(planned.duration_ms / 1000)
        self._heal(applied)

    def _resolve(self, planned: Planned) -> list[str]:
        if planned.fault.startswith("coordinator"):
            return ["zk"]
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
                elif planned.fault in ("pause", "coordinator-pause"):
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

    def _heal(self, applied: Applied) -> None:
        for target in applied.target.split(","):
            ident = "zk" if target == "zk" else int(target)
            try:
                if applied.fault in ("pause", "coordinator-pause"):
                    self.cluster.kill(ident, "CONT")
                else:
                    self.cluster.start(ident, wait=False)
            except Exception as e:
                applied.error = (applied.error or "") + f"; heal: {e}"
                log.warning("nemesis: healing %s of %s failed: %s", applied.fault,
                            target, e)
        applied.end_ns = time.monotonic_ns()
        with self._lock:
            self.active.remove(applied)

    def heal_all(self) -> None:
        """After the run: every process running again (resume the stopped, start the dead)."""
        for ident in ["zk", *self.cluster.broker_ids]:
            process = self.cluster.process(ident)
            state = process.state()
            if state == "stopped":
                self.cluster.kill(ident, "CONT")
            elif process.pid() is None:
                self.cluster.start(ident, wait=False)
