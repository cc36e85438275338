"""``minikafka scenario list | run NAME [--step] [--speed X] [--dir D] [--client C]``:
the seeds' replication stories, told on real processes (``bench.teach.catalog``).

Before each step the run says what is about to happen and why; after it, it draws the
cluster (leader, leader epoch, ISR, each replica's LEO and HW as a bar, the committed
region: ``Stage.picture``) and tells what each producer saw since the last step
(``narrate``). It ends with what the client believed was written against what
survived, then every expectation beside the prediction of the seeds. ``--client``
picks the producers' client: native (in-process, the default) or a real Kafka client
(``bench.chaos.clients``) in a worker process on the Kafka listeners. Exit 0 when the
outcome matches the prediction, 1 when it does not (or the run failed), 2 on bad usage
(an unknown scenario or client, a client not installed, a partition scenario without
root).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.teach import narrate
from bench.teach.catalog import CATALOG, Play, Scenario, find
from bench.teach.stage import ScenarioError, Stage
from node.paths import absolute_path


@dataclass
class Result:
    scenario: str
    matched: bool
    wall_s: float
    expectations: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    error: str | None = None


def _wrap(text: str, indent: str = "  ") -> str:
    return textwrap.fill(text, width=88, initial_indent=indent, subsequent_indent=indent)


def run_scenario(scenario: Scenario, directory: Path, *, speed: float = 1.0, out=print,
                 gate=None, on_picture=None, should_stop: threading.Event | None = None,
                 on_stage=None, before_close=None, show_pictures: bool = True,
                 client: str = "native") -> Result:
    """Play ``scenario`` with its clusters under ``directory``. ``gate(step_no, step)``
    is called before each step (to wait for Enter or a button); ``on_picture(text)``
    after each; ``on_stage(stage)`` when a cluster is made and ``before_close()`` before
    they are stopped. ``client`` writes the scenarios' producers (``Stage.writer``).
    Every cluster is stopped at the end, whatever happens."""
    started = time.monotonic()
    counter = {"n": 0}

    def make_stage(label: str = "", **kw) -> Stage:
        counter["n"] += 1
        name = label or f"cluster-{counter['n']}"
        stage = Stage(directory / name, label=label, out=out, client=client, **kw)
        if on_stage is not None:
            on_stage(stage)
        return stage

    def hold(seconds: float) -> None:
        (should_stop or threading.Event()).wait(seconds / max(speed, 0.01))

    play = Play(make_stage, hold)
    marks: dict = {}
    out(f"== {scenario.name}: {scenario.title} ({scenario.source})")
    out(f"prediction: {scenario.prediction}")
    error = None
    body = scenario.body(play)
    try:
        step = next(body)
        n = 1
        while True:
            out("")
            out(f"step {n}: {step.title}")
            out(_wrap(step.text))
            if gate is not None:
                gate(n, step)
            if should_stop is not None and should_stop.is_set():
                raise ScenarioError("stopped")
            try:
                following = next(body)
            except StopIteration:
                following = None
            pictures = [s.picture(play.topics) for s in play.stages if not s._down]
            text = "\n".join(p for p in pictures if p)
            if text:
                if show_pictures:
                    out(text)
                if on_picture is not None:
                    on_picture(text)
            for line in _step_story(play, marks):
                out(line)
            if following is None:
                break
            step, n = following, n + 1
    except (ScenarioError, TimeoutError) as e:
        error = str(e)
    except Exception as e:  # a broken step: say which, stop the clusters, report
        error = f"{type(e).__name__}: {e}"
    finally:
        if error is not None:   # what the producers saw up to the failure
            for line in _step_story(play, marks):
                out(line)
        try:
            beliefs = _beliefs(play)
        except Exception as e:  # the story's end is told even when a step broke
            beliefs = []
            out(f"(what the clients believed: {type(e).__name__}: {e})")
        if before_close is not None:
            before_close()
        for s in play.stages:
            try:
                s.close()
            except Exception as e:
                out(f"(stopping a cluster: {e})")
    matched = error is None and bool(play.expectations) and all(
        e.ok for e in play.expectations)
    result = Result(scenario.name, matched, time.monotonic() - started,
                    [(e.ok, e.text) for e in play.expectations], play.notes, error)
    for label, rows in beliefs:
        out("")
        for line in narrate.end_lines(label, rows):
            out(line)
    if client != "native" and not _writers(play):
        out("")
        out(f"(this scenario writes its few records with the native client: --client "
            f"{client} changes nothing in it)")
    out("")
    out("verdict:")
    for ok, text in result.expectations:
        out(f"  [{'as predicted' if ok else 'NOT as predicted'}] {text}")
    for note in play.notes:
        out(f"  note: {note}")
    if error:
        out(f"  the run failed: {error}")
    out(f"{'outcome matches the prediction' if matched else 'OUTCOME DOES NOT MATCH'}: "
        f"{scenario.prediction} (wall time {result.wall_s:.1f} s)")
    return result


def _writers(play: Play) -> list:
    return [w for s in play.stages for w in s.writers]


def _step_story(play: Play, marks: dict) -> list[str]:
    """What each writer saw since the last step (writers with nothing new stay quiet)."""
    lines = []
    for w in _writers(play):
        ops, events = w.history(), list(w.client_events)
        mark = marks.get(id(w), narrate.Mark())
        before = marks.get(("retries", id(w)))
        if len(ops) == mark.ops and len(events) == mark.events:
            continue
        seen = narrate.seen(ops[mark.ops:], events[mark.events:], before)
        marks[id(w)] = narrate.Mark(len(ops), len(events))
        marks[("retries", id(w))] = seen.retries
        lines += narrate.step_lines(w.name, w.label, seen, narrate.awaiting(ops))
    if lines:
        lines.insert(0, "  what the producers saw:")
    return lines


def _beliefs(play: Play) -> list[tuple[str, list]]:
    """Per client label, each writer's acknowledged sends against the last read of its
    partition: read now, its writers stopped, if its cluster is still up; else the
    scenario's own last read, against the sends made before it."""
    from bench.chaos.checker import check
    by_label: dict[str, list] = {}
    for s in play.stages:
        for w in s.writers:
            key = (w.topic, w.partition)
            if not s._down:
                w.stop()
                try:
                    s.read(*key)
                except ScenarioError:
                    pass
            if key not in s.reads:
                continue
            read_ns, final = s.reads[key]
            history = [op for op in w.history() if op.time_ns <= read_ns]
            v = check(history, {w.partition: sorted(final.items())})
            seen = narrate.seen(history, w.client_events)
            by_label.setdefault(w.label, []).append(narrate.Belief(
                w.name, w.topic, w.partition, v.acknowledged, v.lost, v.failed, v.unknown,
                len(v.duplicate), seen))
    return list(by_label.items())


def _list() -> int:
    width = max(len(s.name) for s in CATALOG)
    for s in CATALOG:
        root = "  (root: network namespaces)" if s.netns else ""
        print(f"{s.name:<{width}}  {s.title} [{s.source}]{root}")
        print(f"{'':<{width}}  predicted: {s.prediction}")
    return 0


def _run(args) -> int:
    try:
        scenario = find(args.name)
    except KeyError:
        print(f"scenario: error: no scenario {args.name!r} (see 'minikafka scenario list')",
              file=sys.stderr)
        return 2
    if args.speed <= 0:
        print("scenario: error: --speed must be positive", file=sys.stderr)
        return 2
    why = client_problem(args.client)
    if why is not None:
        print(f"scenario: error: {why}", file=sys.stderr)
        return 2
    if scenario.netns:
        from node.cluster.netns import available
        why = available()
        if why is not None:
            print(f"scenario: error: {scenario.name} {why}", file=sys.stderr)
            return 2
    keep = args.dir is not None
    directory = Path(args.dir) if keep else Path(tempfile.mkdtemp(prefix="minikafka-scenario-"))
    if keep and directory.exists() and any(directory.iterdir()):
        print(f"scenario: error: {directory} is not empty: give a new directory",
              file=sys.stderr)
        return 2
    directory.mkdir(parents=True, exist_ok=True)

    def enter(n, step):
        try:
            input(f"  [Enter] to run step {n} ")
        except EOFError:
            pass
    try:
        result = run_scenario(scenario, directory, speed=args.speed,
                              gate=enter if args.step else None, client=args.client)
    finally:
        if not keep:
            shutil.rmtree(directory, ignore_errors=True)
    return 0 if result.matched else 1


def client_problem(client: str) -> str | None:
    """Why ``client`` cannot write a scenario here (one line), or None."""
    from bench.chaos.clients import CLIENTS, missing
    if client not in CLIENTS:
        return f"no client {client!r} (one of {', '.join(CLIENTS)})"
    why = missing(client)
    return None if why is None else f"--client {client}: {why}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="scenario_command", required=True)
    sub.add_parser("list", help="the catalog: each scenario, its source and its prediction")
    run = sub.add_parser("run", help="play one scenario on real processes")
    run.add_argument("name")
    run.add_argument("--step", action="store_true", help="wait for Enter before each step")
    run.add_argument("--speed", type=float, default=1.0,
                     help="shorten (>1) or lengthen (<1) the pauses that let writes flow")
    run.add_argument("--dir", default=None, type=absolute_path,
                     help="where the clusters live (kept); a temporary directory otherwise")
    run.add_argument("--client", default="native",
                     help="the producers' client: native (in-process, the default), "
                          "confluent-kafka, kafka-python, aiokafka or kafkajs (a worker "
                          "process on the Kafka listeners)")


def run(args) -> int:
    import logging
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    if args.scenario_command == "list":
        return _list()
    return _run(args)
