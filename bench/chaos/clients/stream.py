"""``WorkerStream``: one running worker (``python -m bench.chaos.clients``, or any command
writing the same events) whose stdout events become ``bench.chaos.checker.Op`` s; the
``txn`` events of ``bench.chaos.txn_worker`` are kept as they came (``txn_events``) and
counted (committed as acknowledged, aborted as failed, unknown)."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from bench.chaos.checker import Op
from bench.chaos.clients.events import decode_op

REPO = Path(__file__).resolve().parents[3]
STOP_TIMEOUT_S = 30.0      # default for stop(): the worker's flush included
STDIN_GRACE_S = 1.0        # after closing stdin, before SIGTERM
KILL_WAIT_S = 5.0
_OP_FIELDS = {f.name for f in dataclasses.fields(Op)}


def op_from_event(event: dict) -> Op:
    """An ``op`` event as an ``Op`` (fields this checker's Op lacks are dropped)."""
    return Op(**{k: v for k, v in decode_op(event).items() if k in _OP_FIELDS})


class WorkerStream:
    """Starts ``prefix + command`` (stdin a pipe, stdout read here on a thread, stderr to
    ``log_path`` or discarded) and keeps what it reports."""

    def __init__(self, command: list[str], log_path=None, prefix=(), env: dict | None = None,
                 cwd=None) -> None:
        env = dict(os.environ if env is None else env)
        # The worker imports bench.*: the repository on its path whatever the cwd.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
        self._log = open(log_path, "ab") if log_path else None
        self.command = list(prefix) + list(command)
        self._lock = threading.Lock()
        self.ops: list[Op] = []
        self.acked = self.failed = self.unknown = self.read = 0
        self.last_error: str | None = None
        self.client_info: dict | None = None       # the start event
        self.client_events: list[dict] = []
        self.end_info: dict | None = None          # the end event
        self.txn_events: list[dict] = []           # bench.chaos.txn_worker's txn events
        self.bad_lines = 0
        try:
            self.proc = subprocess.Popen(
                self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._log if self._log else subprocess.DEVNULL, env=env, cwd=cwd)
        except BaseException:
            if self._log:
                self._log.close()
            raise
        self._reader = threading.Thread(target=self._read, name="worker-stream", daemon=True)
        self._reader.start()

    # ------------------------------------------------------------------ reading
    def _read(self) -> None:
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
                kind = event["event"]
            except (ValueError, KeyError, TypeError):
                with self._lock:
                    self.bad_lines += 1
                    self.client_events.append({"event": "client", "kind": "log",
                                               "text": line.decode("utf-8", "replace")[:300],
                                               "time_ns": 0})
                continue
            with self._lock:
                self._take(kind, event)

    def _take(self, kind: str, event: dict) -> None:
        if kind == "op":
            op = op_from_event(event)
            self.ops.append(op)
            if op.f == "send":
                if op.type == "ok":
                    self.acked += 1
                elif op.type == "fail":
                    self.failed += 1
                elif op.type == "info":
                    self.unknown += 1
            elif op.f == "poll" and op.type == "ok":
                self.read += len(op.reads)
            if op.type in ("fail", "info") and op.error:
                self.last_error = op.error
        elif kind == "txn":
            self.txn_events.append(event)
            kind_ = event.get("type")       # invoke, then ok / fail / info
            if event.get("writes"):         # not a reader's poll
                self.acked += kind_ == "ok"
                self.failed += kind_ == "fail"
                self.unknown += kind_ == "info"
            if kind_ != "invoke":
                self.read += len(event.get("reads") or ())
            if event.get("error"):
                self.last_error = event["error"]
        elif kind == "start":
            self.client_info = event
        elif kind == "client":
            self.client_events.append(event)
            if event.get("kind") == "error":
                self.last_error = event.get("text")
        elif kind == "end":
            self.end_info = event

    def history(self) -> list[Op]:
        with self._lock:
            return list(self.ops)

    def counts(self) -> dict:
        with self._lock:
            return {"acked": self.acked, "failed": self.failed, "unknown": self.unknown,
                    "read": self.read}

    # ------------------------------------------------------------------ the process
    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def wait(self, timeout_s: float | None = None) -> int:
        """Wait for the worker to exit (``subprocess.TimeoutExpired`` after ``timeout_s``)
        and for its last events to be read."""
        code = self.proc.wait(timeout_s)
        self._reader.join(timeout_s)
        self._close_files()
        return code

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Close its stdin (a ``--duration 0`` worker stops and flushes), then SIGTERM,
        then SIGKILL after ``timeout_s``; waits for it."""
        try:
            if self.proc.stdin and not self.proc.stdin.closed:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            return self.wait(min(STDIN_GRACE_S, timeout_s))
        except subprocess.TimeoutExpired:
            pass
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.wait(max(0.1, timeout_s - STDIN_GRACE_S))
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.wait(KILL_WAIT_S)

    def _close_files(self) -> None:
        if self._log and not self._log.closed:
            self._log.close()
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if not self._reader.is_alive() and self.proc.stdout and not self.proc.stdout.closed:
            self.proc.stdout.close()

    def __enter__(self) -> "WorkerStream":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.stop()
        else:
            self.wait(KILL_WAIT_S)
