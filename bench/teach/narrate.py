"""What a scenario's producers saw, told in a line or two: after each step, per writer,
the delivery reports since the last step (acknowledged, refused, unknown), the errors
by kind and the client's retries; at the end, what the client believed was written
against what survived.

Pure: it reads a writer's history (``bench.chaos.checker.Op``) and the client's own
events (the ``client`` events of ``bench.chaos.clients``: error callbacks, retries), and
returns text. The native writer has no client events; its lines read the same.

An error's *kind* is the name the client gave it: Kafka's code in capitals
(``NOT_ENOUGH_REPLICAS``, librdkafka's ``_MSG_TIMED_OUT``), else an exception class name
(``KafkaTimeoutError``, ``KafkaJSNumberOfRetriesExceeded``), else the text before its
first colon.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

KINDS_SHOWN_MAX = 4        # error kinds named in one line; the rest are "N more kinds"
KIND_CHARS_MAX = 40
EXAMPLES_SHOWN_MAX = 3     # lost values named at the end

_CODE = re.compile(r"\b_?[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")
_CLASS = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Exception|Exceeded|Timeout)[A-Za-z0-9]*\b")


def kind(text: str | None) -> str:
    """The name of an error, from the text a client gave (see the module's rules)."""
    text = (text or "").strip()
    if not text:
        return "error"
    for pattern in (_CODE, _CLASS):
        m = pattern.search(text)
        if m:
            return m.group(0)[:KIND_CHARS_MAX]
    return text.split(":", 1)[0].strip()[:KIND_CHARS_MAX] or "error"


@dataclass(frozen=True)
class Mark:
    """Where a writer's story was told up to: its ops and its client events."""
    ops: int = 0
    events: int = 0


@dataclass
class Seen:
    """What one writer saw over a stretch of its history."""
    acknowledged: int = 0
    refused: int = 0
    unknown: int = 0
    errors: Counter = None          # kind -> count, from refused/unknown sends
    reported: Counter = None        # kind -> count, from the client's error events
    retries: int | None = None      # the client's cumulative retry count, if it says

    def __post_init__(self):
        self.errors = self.errors if self.errors is not None else Counter()
        self.reported = self.reported if self.reported is not None else Counter()


def seen(ops, events, retries_before: int | None = None) -> Seen:
    """Tally sends' outcomes (``ok``/``fail``/``info``) and client events."""
    s = Seen(retries=retries_before)
    for op in ops:
        if op.f != "send" or op.type == "invoke":
            continue
        if op.type == "ok":
            s.acknowledged += 1
        elif op.type == "fail":
            s.refused += 1
            s.errors[kind(op.error)] += 1
        elif op.type == "info":
            s.unknown += 1
            s.errors[kind(op.error)] += 1
    counted_retries = 0
    for e in events:
        k = e.get("kind")
        if k == "error":
            s.reported[kind(e.get("text"))] += 1
        elif k == "retry":
            if isinstance(e.get("count"), int):   # cumulative, where the client counts
                s.retries = max(s.retries or 0, e["count"])
            else:
                counted_retries += 1
    if counted_retries:
        s.retries = (s.retries or 0) + counted_retries
    return s


def awaiting(ops) -> int:
    """Sends handed to the client with no report yet (a pipelining client's queue)."""
    sent = done = 0
    for op in ops:
        if op.f == "send":
            if op.type == "invoke":
                sent += 1
            else:
                done += 1
    return sent - done


def _kinds(counter: Counter) -> str:
    items = counter.most_common()
    text = ", ".join(f"{k} x{n}" for k, n in items[:KINDS_SHOWN_MAX])
    if len(items) > KINDS_SHOWN_MAX:
        text += f", {len(items) - KINDS_SHOWN_MAX} more kinds"
    return text


def _troubles(s: Seen) -> str:
    parts = []
    if s.errors:
        parts.append(f"send errors: {_kinds(s.errors)}")
    if s.reported:
        parts.append(f"the client reported: {_kinds(s.reported)}")
    if s.retries:
        parts.append(f"retries so far: {s.retries}")
    return "; ".join(parts)


def step_lines(name: str, client: str, s: Seen, waiting: int = 0) -> list[str]:
    """One or two lines: what writer ``name`` (of ``client``) saw since the last step;
    ``waiting``: its sends with no report yet (said when more than one)."""
    first = (f"  {client} producer {name}: {s.acknowledged} delivery reports ok since the "
             f"last step, {s.refused} refused, {s.unknown} unknown"
             + (f"; {waiting} sends awaiting a report" if waiting > 1 else ""))
    troubles = _troubles(s)
    return [first] + ([f"    {troubles}"] if troubles else [])


@dataclass
class Belief:
    """One writer's account against the final read of its partition."""
    name: str
    topic: str
    partition: int
    acknowledged: int
    lost: list          # [(value, partition, offset)]
    refused: int
    unknown: int
    duplicates: int
    seen: Seen


def end_lines(client: str, beliefs: list[Belief]) -> list[str]:
    """What ``client`` believed was written against what survived, per writer."""
    lines = [f"what {client} believed was written against what survived:"]
    for b in beliefs:
        examples = ", ".join(f"{v.decode(errors='replace')}@{o}"
                             for v, _, o in b.lost[:EXAMPLES_SHOWN_MAX])
        lost = f"of which lost {len(b.lost)}" + (f" (e.g. {examples})" if examples else "")
        dup = f", written twice {b.duplicates}" if b.duplicates else ""
        lines.append(f"  {b.name} -> {b.topic}-{b.partition}: acknowledged {b.acknowledged}, "
                     f"{lost}; refused {b.refused}, unknown {b.unknown}{dup}")
        troubles = _troubles(b.seen)
        lines.append(f"    {troubles if troubles else 'errors it reported: none'}")
    return lines
