"""Parent side of ``zkworker.py``: spawn client processes, read their JSON lines, kill them."""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("zkworker.py")
REPO_ROOT = Path(__file__).resolve().parents[2]


class Worker:
    def __init__(self, role: str, **args):
        self.role = role
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER_SCRIPT), role, json.dumps(args)], cwd=REPO_ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            start_new_session=True)
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(json.loads(line))
        self._lines.put(None)

    def stderr_text(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-3000:]

    def next_message(self, timeout_s: float) -> dict:
        try:
            message = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            raise AssertionError(f"{self.role} worker said nothing within {timeout_s} s") from None
        assert message is not None, f"{self.role} worker exited early:\n{self.stderr_text()}"
        return message

    def release(self) -> None:
        """Let a role that waits on stdin go on."""
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()

    def result(self, timeout_s: float) -> dict:
        """The last JSON line, after a clean exit."""
        try:
            returncode = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.role} worker still running after {timeout_s} s") from None
        assert returncode == 0, f"{self.role} worker exited {returncode}:\n{self.stderr_text()}"
        messages = []
        while (message := self._lines.get(timeout=timeout_s)) is not None:
            messages.append(message)
        assert messages, f"{self.role} worker printed nothing:\n{self.stderr_text()}"
        return messages[-1]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._stderr.close()
