"""Composed nemesis schedules: rounds of one or two OVERLAPPING faults, drawn from a
seed, as Jepsen's combined nemeses compose theirs (``nemesis/compose``). The plain
``nemesis.plan`` never overlaps two faults, so the losses that need two failures at
once (the ISR shrunk to one replica, then that replica lost) never show in it.

Rules (``tests/bench/chaos/test_compose.py`` checks each):

- A schedule is rounds separated by quiet gaps (``nemesis.GAP_MS``). A round holds one
  fault or two whose windows overlap; never more than two are active at once.
- Every fault starts and ends inside its round: each is healed when its round ends,
  and the last round ends ``nemesis.HEAL_TAIL_MS`` before the run does.
- At most one ``power-failure`` per round, aimed at one broker (never ``all``): at
  most one broker per round loses its unflushed tail.
- The same seed, faults and duration give the same schedule. It is an ordinary
  schedule (``nemesis.Planned`` list): ``schedule.json`` and ``chaos replay`` take it.
- Only faults in the allowed list are drawn. A round is a named pattern (when every
  fault it needs is allowed) or a random single or overlapping pair:

  ``isr-shrink-then-kill``  the followers of partition 0 paused (or cut off from the
      leader, with ``partition``) past ``replica.lag.time.max.ms`` so the ISR shrinks to
      the leader; then the leader killed (or power-failed) before they come back;
  ``kill-during-controller-move``  /controller deleted (``controller-move``) or the
      controller killed, and a broker killed while the election runs;
  ``partition-while-paused``  a broker paused, and a partition cut while it is.
"""
from __future__ import annotations

import random

from bench.chaos import nemesis

ISR_LAG_MS = 4000                    # replica.lag.time.max.ms of the chaos runs
PAIR_PERCENT = 70                    # random rounds: two overlapping faults this often
PATTERN_PERCENT = 50                 # a round is a named pattern this often (if any fits)
OVERLAP_MIN_MS = 300                 # a pair's second fault starts this far before the
                                     # first ends, at least
MOVE_KILL_DELAY_MS = (100, 800)      # the kill after a controller move starts
MOVE_MS = 1500                       # a controller-move's window (the election's time)
ACTIVE_AT_ONCE_MAX = 2


def plan(seed: int, faults: list[str], duration_s: float,
         targets: tuple[str, ...] = ("random", "leader"),
         lag_ms: int = ISR_LAG_MS) -> list[nemesis.Planned]:
    """Rounds of overlapping faults from ``faults`` (see the rules above)."""
    nemesis.check_faults(faults)
    rng = random.Random(seed)
    out: list[nemesis.Planned] = []
    at = nemesis.FIRST_AT_MS
    end = int(duration_s * 1000) - nemesis.HEAL_TAIL_MS
    patterns = [p for p, needs in PATTERNS.items() if needs(faults)]
    while True:
        if patterns and rng.randrange(100) < PATTERN_PERCENT:
            round_ = PATTERN_DRAW[rng.choice(patterns)](rng, faults, targets, lag_ms)
        else:
            round_ = _random_round(rng, faults, targets)
        length = max(p.at_ms + p.duration_ms for p in round_)
        if at + length > end:
            return out
        out += sorted((nemesis.Planned(at + p.at_ms, p.duration_ms, p.fault, p.target)
                       for p in round_), key=lambda p: p.at_ms)
        at += length + rng.randint(*nemesis.GAP_MS)


def _target(rng: random.Random, fault: str, targets) -> str:
    if fault == "partition":
        return rng.choice(nemesis.PARTITION_TARGETS)
    if fault in nemesis.BROKER_FAULTS:
        return rng.choice(targets)
    if fault.startswith("coordinator"):
        return "zk"
    if fault == "late-write":
        return "random"         # a partition of the topic, drawn when it is sent
    return "controller"


def _random_round(rng: random.Random, faults, targets) -> list[nemesis.Planned]:
    first = rng.choice(faults)
    length = rng.randint(*nemesis.FAULT_MS)
    out = [nemesis.Planned(0, length, first, _target(rng, first, targets))]
    # One power cut per round; zk_lite and the controller are one process each, so the
    # same fault twice on them is one fault.
    seconds = [f for f in faults
               if f != first or f in nemesis.BROKER_FAULTS and f != "power-failure"]
    if seconds and rng.randrange(100) < PAIR_PERCENT:
        second = rng.choice(seconds)
        at = rng.randint(0, length - OVERLAP_MIN_MS)
        out.append(nemesis.Planned(at, rng.randint(*nemesis.FAULT_MS), second,
                                   _target(rng, second, targets)))
    return out


def _isr_shrink_then_kill(rng, faults, targets, lag_ms) -> list[nemesis.Planned]:
    # The leader's ISR check drops a follower lag_ms after it stopped catching up;
    # kill the leader once that surely happened, resume the followers while it is down.
    kill_at = lag_ms + rng.randint(1000, 2000)
    isolate = rng.choice([f for f in ("pause", "partition") if f in faults])
    isolated = nemesis.Planned(0, kill_at + rng.randint(500, 1500), isolate,
                               "followers" if isolate == "pause" else "leader|followers")
    killer = rng.choice([f for f in ("kill", "power-failure") if f in faults])
    return [isolated, nemesis.Planned(kill_at, rng.randint(3000, 5000), killer, "leader")]


def _kill_during_controller_move(rng, faults, targets, lag_ms) -> list[nemesis.Planned]:
    mover = rng.choice([f for f in ("controller-move", "controller") if f in faults])
    move = nemesis.Planned(
        0, MOVE_MS if mover == "controller-move" else rng.randint(*nemesis.FAULT_MS),
        mover, "controller")
    return [move, nemesis.Planned(rng.randint(*MOVE_KILL_DELAY_MS),
                                  rng.randint(*nemesis.FAULT_MS), "kill", rng.choice(targets))]


def _partition_while_paused(rng, faults, targets, lag_ms) -> list[nemesis.Planned]:
    pause_ms = rng.randint(*nemesis.FAULT_MS) + 1000
    return [nemesis.Planned(0, pause_ms, "pause", rng.choice(targets)),
            nemesis.Planned(rng.randint(0, pause_ms - OVERLAP_MIN_MS),
                            rng.randint(*nemesis.FAULT_MS),
                            "partition", rng.choice(nemesis.PARTITION_TARGETS))]


PATTERNS = {
    "isr-shrink-then-kill": lambda fs: bool({"pause", "partition"} & set(fs)) and bool(
        {"kill", "power-failure"} & set(fs)),
    "kill-during-controller-move": lambda fs: "kill" in fs and bool(
        {"controller-move", "controller"} & set(fs)),
    "partition-while-paused": lambda fs: {"pause", "partition"} <= set(fs),
}
PATTERN_DRAW = {"isr-shrink-then-kill": _isr_shrink_then_kill,
                "kill-during-controller-move": _kill_during_controller_move,
                "partition-while-paused": _partition_while_paused}
assert set(PATTERNS) == set(PATTERN_DRAW)


def rounds(schedule: list[nemesis.Planned]) -> list[list[nemesis.Planned]]:
    """The schedule's rounds: its faults grouped by overlapping windows."""
    out: list[list[nemesis.Planned]] = []
    end = -1
    for p in sorted(schedule, key=lambda p: p.at_ms):
        if out and p.at_ms < end:
            out[-1].append(p)
            end = max(end, p.at_ms + p.duration_ms)
        else:
            out.append([p])
            end = p.at_ms + p.duration_ms
    return out


def overlaps(windows: list[tuple[str, int, int]]) -> list[tuple[int, int, list[str]]]:
    """Where two or more faults were active at once: ``windows`` are (label, start,
    end) in any unit; returns (start, end, labels) for each stretch of overlap."""
    events = sorted([(s, 1, label) for label, s, e in windows] +
                    [(e, 0, label) for label, s, e in windows])
    active: list[str] = []
    out: list[tuple[int, int, list[str]]] = []
    since = None
    for t, starting, label in events:
        if starting:
            active.append(label)
        else:
            active.remove(label)
        if len(active) >= 2 and since is None:
            since, labels = t, list(active)
        elif len(active) >= 2:
            labels = labels + [a for a in active if a not in labels]
        elif since is not None:
            if t > since:
                out.append((since, t, labels))
            since = None
    return out
