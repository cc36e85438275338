"""A transactional chaos history on the wire and on disk: the ``txn`` events the
transactional workers print (``bench.chaos.txn_worker``) and the JSON-lines files a run
keeps (``txns/<worker>.jsonl``, ``final-committed.jsonl``, ``final-uncommitted.jsonl``),
decoded into ``bench.chaos.txn_checker.Txn`` and read-back views in one place.

``txn`` event (one line of a worker's stdout; values base64):

    {"event": "txn", "process": "p0", "id": "p0-17", "type": "ok"|"fail"|"info",
     "writes": [[topic, partition, value_b64], ...],
     "reads": [[topic, partition, offset, value_b64], ...],
     "continues": true, "start_ns": N, "end_ns": N, "error": "..."}

A worker prints the same event with ``"type": "invoke"`` before the transaction's first
call (its reads done, its writes chosen) and again with the outcome after it:
``completed(events)`` keeps the last event of each id and turns an ``invoke`` that never
completed (the worker was killed mid-transaction) into ``info``, so its values in the log
have a writer.

A read-back row: ``{"topic": T, "partition": P, "offset": O, "value": b64}``.
"""
from __future__ import annotations

import base64
import json
import os
from typing import Iterable

from bench.chaos.txn_checker import TYPES, Txn

EVENT_TYPES = ("invoke",) + TYPES

TEXT_MAX = 300


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _unb64(text) -> bytes:
    if not isinstance(text, str):
        raise ValueError(f"expected base64 text, got {type(text).__name__}")
    return base64.b64decode(text, validate=True)


def txn_event(txn: Txn, error: str | None = None) -> dict:
    event = {"event": "txn", "process": txn.process, "id": txn.id, "type": txn.type,
             "writes": [[t, p, _b64(v)] for t, p, v in txn.writes],
             "reads": [[t, p, o, _b64(v)] for t, p, o, v in txn.reads],
             "continues": txn.continues, "start_ns": txn.start_ns, "end_ns": txn.end_ns}
    if error is not None:
        event["error"] = str(error)[:TEXT_MAX]
    return event


def completed(events: Iterable[dict]) -> list[dict]:
    """One event per transaction id, in first-seen order: the last one given, an
    ``invoke`` left without a completion made ``info``."""
    last: dict[str, dict] = {}
    for event in events:
        if event.get("type") not in EVENT_TYPES:
            raise ValueError(f"txn event type {event.get('type')!r}")
        last[str(event.get("id"))] = event
    out = []
    for event in last.values():
        if event["type"] == "invoke":
            event = {**event, "type": "info", "error": "never completed (the worker "
                                                       "stopped mid-transaction)"}
        out.append(event)
    return out


def txn_from_event(event: dict) -> Txn:
    """A ``txn`` event (parsed JSON) as a ``Txn``; ValueError if malformed."""
    if event.get("event", "txn") != "txn":
        raise ValueError(f"not a txn event: {event.get('event')!r}")
    try:
        if event["type"] not in TYPES:
            raise ValueError(f"type {event['type']!r}")
        return Txn(str(event["id"]), str(event["process"]), event["type"],
                   writes=tuple((str(t), int(p), _unb64(v)) for t, p, v in event["writes"]),
                   reads=tuple((str(t), int(p), int(o), _unb64(v))
                               for t, p, o, v in event["reads"]),
                   continues=bool(event.get("continues", False)),
                   start_ns=int(event.get("start_ns", 0)), end_ns=int(event.get("end_ns", 0)))
    except (KeyError, TypeError, ValueError) as e:    # binascii.Error is a ValueError
        raise ValueError(f"malformed txn event ({e}): {event!r:.200}") from None


def write_txns(path: str | os.PathLike, events: Iterable[dict]) -> None:
    """The ``txn`` events of one worker, one JSON object a line, in the given order."""
    with open(path, "w") as f:
        for event in events:
            f.write(json.dumps(event, separators=(",", ":")) + "\n")


def read_txns(path: str | os.PathLike) -> list[Txn]:
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(txn_from_event(json.loads(line)))
            except ValueError as e:
                raise ValueError(f"{path}:{n}: {e}") from None
    return out


def write_view(path: str | os.PathLike, view: dict) -> None:
    """A final read-back {(topic, partition): [(offset, value), ...]}; a partition read
    empty is kept (a row with offset -1 and no value), so it is judged."""
    with open(path, "w") as f:
        for (topic, partition), rows in sorted(view.items()):
            if not rows:
                f.write(json.dumps({"topic": topic, "partition": partition,
                                    "offset": -1}) + "\n")
            for offset, value in rows:
                f.write(json.dumps({"topic": topic, "partition": partition,
                                    "offset": offset, "value": _b64(value)}) + "\n")


def read_view(path: str | os.PathLike) -> dict:
    view: dict = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                rows = view.setdefault((str(row["topic"]), int(row["partition"])), [])
                if int(row["offset"]) >= 0:
                    rows.append((int(row["offset"]), _unb64(row["value"])))
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"{path}:{n}: malformed read-back row ({e})") from None
    return view
