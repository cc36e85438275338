"""The worker's event stream (JSON lines on stdout, one object per line, flushed per line)
and its decoding: the pure part, shared by every Python adapter and by ``WorkerStream``.

    {"event": "start", "client": C, "version": V, "role": R, "name": N, "settings": {...}}
    {"event": "op", "process": N, "type": invoke|ok|fail|info, "f": F, "time_ns": T, ...}
    {"event": "client", "time_ns": T, "kind": error|retry|log, "text": "...", "count": N?}
    {"event": "end", "time_ns": T, "ok": N, "errors": N}

Values are base64; times ``time.monotonic_ns()``. ``Emitter`` writes them (one lock: the
clients call back from their own threads), tracks the sends still outstanding (``Sends``)
and the partitions a group consumer owns (``Ownership``).
"""
from __future__ import annotations

import base64
import json
import sys
import threading
import time

TEXT_MAX = 300            # characters of an error or log text kept in an event
OP_FIELDS = ("value", "partition", "offset", "reads", "error", "partitions", "offsets",
             "member", "generation")


def b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def op_event(process: str, type_: str, f: str, time_ns: int, **fields) -> dict:
    """One ``op`` event; ``value`` bytes and ``reads`` [(p, o, bytes)] are encoded here."""
    assert type_ in ("invoke", "ok", "fail", "info"), type_
    unknown = set(fields) - set(OP_FIELDS)
    assert not unknown, unknown
    event = {"event": "op", "process": process, "type": type_, "f": f, "time_ns": time_ns}
    for k, v in fields.items():
        if v is None:
            continue
        if k == "value":
            v = b64(v)
        elif k == "reads":
            v = [[p, o, b64(val)] for p, o, val in v]
        elif k in ("partitions",):
            v = sorted(v)
        elif k == "offsets":
            v = [[p, o] for p, o in v]
        elif k == "error":
            v = str(v)[:TEXT_MAX]
        event[k] = v
    return event


def decode_op(event: dict) -> dict:
    """An ``op`` event -> keyword arguments of ``bench.chaos.checker.Op`` (values decoded,
    lists as tuples)."""
    kw = {"process": event["process"], "type": event["type"], "f": event["f"],
          "time_ns": int(event["time_ns"])}
    if "value" in event:
        kw["value"] = unb64(event["value"])
    if "reads" in event:
        kw["reads"] = tuple((int(p), int(o), unb64(v)) for p, o, v in event["reads"])
    if "offsets" in event:
        kw["offsets"] = tuple((int(p), int(o)) for p, o in event["offsets"])
    if "partitions" in event:
        kw["partitions"] = tuple(int(p) for p in event["partitions"])
    for k in ("partition", "offset", "generation"):
        if event.get(k) is not None:
            kw[k] = int(event[k])
    for k in ("error", "member"):
        if event.get(k) is not None:
            kw[k] = str(event[k])
    return kw


def error_text(e: BaseException) -> str:
    """``Name: text`` of an exception (the client's error name and message)."""
    return f"{type(e).__name__}: {e}"[:TEXT_MAX]


class Emitter:
    """Writes the events of one worker (``name``) to ``out``; thread-safe."""

    def __init__(self, name: str, out=None) -> None:
        self.name = name
        self.out = out if out is not None else sys.stdout
        self.lock = threading.Lock()
        self.ok = 0            # sends acknowledged + records read
        self.errors = 0        # sends failed or unknown, polls that raised, client errors
        self.ended = False

    def write(self, event: dict) -> None:
        line = json.dumps(event, separators=(",", ":"))
        with self.lock:
            if self.ended:
                return         # a late callback after the end: nothing follows ``end``
            self.out.write(line + "\n")
            self.out.flush()

    def start(self, client: str, version: str, role: str, settings: dict) -> None:
        self.write({"event": "start", "client": client, "version": version, "role": role,
                    "name": self.name, "settings": {k: v for k, v in settings.items()}})

    def op(self, type_: str, f: str, time_ns: int | None = None, **fields) -> None:
        if type_ in ("fail", "info"):
            with self.lock:
                self.errors += 1
        elif type_ == "ok" and f in ("send", "poll"):
            with self.lock:
                self.ok += len(fields.get("reads", ())) if f == "poll" else 1
        self.write(op_event(self.name, type_, f,
                            time.monotonic_ns() if time_ns is None else time_ns, **fields))

    def client(self, kind: str, text: str, count: int | None = None) -> None:
        assert kind in ("error", "retry", "log"), kind
        event = {"event": "client", "time_ns": time.monotonic_ns(), "kind": kind,
                 "text": str(text)[:TEXT_MAX]}
        if count is not None:
            event["count"] = int(count)
        self.write(event)

    def poll(self, invoked_ns: int, reads: list) -> None:
        """A poll that returned records (one with none writes nothing)."""
        if reads:
            self.op("invoke", "poll", invoked_ns)
            self.op("ok", "poll", reads=reads)

    def poll_failed(self, invoked_ns: int, error: str) -> None:
        self.op("invoke", "poll", invoked_ns)
        self.op("info", "poll", error=error)

    def end(self) -> None:
        event = {"event": "end", "time_ns": time.monotonic_ns(), "ok": self.ok,
                 "errors": self.errors}
        self.write(event)
        with self.lock:
            self.ended = True


class Sends:
    """The sends handed to the client and not yet completed; every send completes once
    (a completion for a value already completed is dropped)."""

    def __init__(self, emitter: Emitter) -> None:
        self.em = emitter
        self.lock = threading.Lock()
        self.pending: set[bytes] = set()

    def invoke(self, value: bytes) -> None:
        with self.lock:
            assert value not in self.pending, value
            self.pending.add(value)
        self.em.op("invoke", "send", value=value)

    def _take(self, value: bytes) -> bool:
        with self.lock:
            if value not in self.pending:
                return False
            self.pending.discard(value)
            return True

    def ok(self, value: bytes, partition: int, offset: int) -> None:
        if self._take(value):
            self.em.op("ok", "send", value=value, partition=partition, offset=offset)

    def failed(self, value: bytes, definite: bool, error: str) -> None:
        """``definite``: the client says it certainly was not written (``fail``); else
        the outcome is unknown (``info``)."""
        if self._take(value):
            self.em.op("fail" if definite else "info", "send", value=value, error=error)

    def outstanding(self) -> int:
        with self.lock:
            return len(self.pending)

    def give_up(self, why: str) -> None:
        """Every send still outstanding completes ``info`` (its outcome is unknown)."""
        with self.lock:
            left = sorted(self.pending)
        for value in left:
            self.failed(value, False, why)


class Ownership:
    """The partitions a group consumer owns; writes ``assign``/``revoke`` ops for changes."""

    def __init__(self, emitter: Emitter) -> None:
        self.em = emitter
        self.lock = threading.Lock()
        self.owned: set[int] = set()

    def assign(self, partitions, member: str | None = None, generation: int = -1) -> None:
        with self.lock:
            new = set(partitions) - self.owned
            self.owned |= new
        if new:
            self.em.op("ok", "assign", partitions=new, member=member or None,
                       generation=generation)

    def revoke(self, partitions, lost: bool = False) -> None:
        with self.lock:
            gone = set(partitions) & self.owned
            self.owned -= gone
        if gone:
            self.em.op("ok", "revoke", partitions=gone, error="lost" if lost else None)

    def revoke_all(self) -> None:
        self.revoke(set(self.owned))

    def commit(self, offsets, error: str | None = None, definite: bool = False) -> None:
        """A commit the client reported: ok, or (``error``) fail/info."""
        offsets = sorted(offsets)
        if not offsets:
            return
        if error is None:
            self.em.op("ok", "commit", offsets=offsets)
        else:
            self.em.op("fail" if definite else "info", "commit", offsets=offsets, error=error)
