"""One supervised process (``Process``: its command, pid file and log file) and the
supervisor's error, ``ClusterError``.

Rules:
- Every process runs in its own session, so its process group is its pid and a signal
  to the group reaches anything it started; it outlives the command that started it.
- A pid file holds ``pid start_time`` (the start time from /proc/PID/stat), so a
  recycled pid is never mistaken for our process.
- States, as ``status`` prints them: ``alive`` (running), ``stopped`` (SIGSTOPped;
  SIGCONT resumes it) and ``dead`` (not running: killed, exited, or never started).
- A stop is SIGCONT (a stopped process cannot handle TERM), SIGTERM, then SIGKILL after
  a grace period.
"""
from __future__ import annotations

import os
import signal as signals
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from node.paths import child_env
from node.waiting import poll_until

STOP_GRACE_S = 30.0  # > controlled.shutdown.max.retries x retry.backoff.ms (3 x 5 s)
KILL_WAIT_S = 10.0
POLL_INTERVAL_S = 0.05


class ClusterError(Exception):
    """A supervisor operation cannot be done; the message is meant for a user."""


@dataclass(frozen=True)
class ProcessStatus:
    name: str  # "zk" or "broker N"
    pid: int | None
    state: str  # alive | stopped | dead
    address: str
    role: str  # "", "controller", "zookeeper"
    kafka_address: str = ""     # a broker's Kafka-protocol listener ("" if none)


# ----------------------------------------------------------------- processes

def _proc_stat(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of a process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rindex(")") + 2:].split()  # the command name may hold spaces
    return fields[0], int(fields[19])



class Process:
    """One supervised process: its command, pid file and log file."""

    def __init__(self, name: str, command: list[str], pid_path: Path, log_path: Path):
        self.name = name
        self.command = command
        self.pid_path = pid_path
        self.log_path = log_path
        self.popen: subprocess.Popen | None = None  # when this Python process started it

    def pid(self) -> int | None:
        """The pid of the live (or stopped) process, None if it is dead."""
        try:
            pid_text, start_text = self.pid_path.read_text().split()
            pid, start_ticks = int(pid_text), int(start_text)
        except (OSError, ValueError):
            return None
        if self.popen is not None and self.popen.pid == pid:
            self.popen.poll()  # reap it if it died, so it does not linger as a zombie
        stat = _proc_stat(pid)
        if stat is None or stat[1] != start_ticks or stat[0] in "ZX":
            return None
        return pid

    def state(self) -> str:
        pid = self.pid()
        if pid is None:
            return "dead"
        stat = _proc_stat(pid)
        return "stopped" if stat is not None and stat[0] in "Tt" else "alive"

    def start(self) -> int:
        if self.pid() is not None:
            raise ClusterError(f"{self.name} is already running (pid {self.pid()})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = child_env()  # the same code as this process, in a checkout or installed
        env.setdefault("PYTHONUNBUFFERED", "1")
        with open(self.log_path, "ab") as out:
            out.write(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} supervisor starts: "
                      f"{' '.join(self.command)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.command, cwd=self.log_path.parent, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True, env=env)
        stat = _proc_stat(self.popen.pid)
        start_ticks = stat[1] if stat is not None else 0
        tmp = self.pid_path.with_suffix(".pid.tmp")
        tmp.write_text(f"{self.popen.pid} {start_ticks}\n")
        os.replace(tmp, self.pid_path)
        return self.popen.pid

    def signal(self, sig: int) -> bool:
        """Signal the process group; False if the process is dead."""
        pid = self.pid()
        if pid is None:
            return False
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return False
        return True

    def wait_dead(self, timeout_s: float) -> bool:
        try:
            poll_until(lambda: self.pid() is None, timeout_s, f"{self.name} to exit",
                       interval_s=POLL_INTERVAL_S)
        except TimeoutError:
            return False
        return True

    def stop(self, grace_s: float = STOP_GRACE_S) -> None:
        """CONT (a stopped process cannot handle TERM), TERM, then KILL after grace_s."""
        if self.signal(signals.SIGCONT):
            self.signal(signals.SIGTERM)
            if not self.wait_dead(grace_s):
                self.kill_now()
        self.forget()

    def kill_now(self) -> None:
        self.signal(signals.SIGKILL)
        if not self.wait_dead(KILL_WAIT_S):
            raise ClusterError(f"{self.name} (pid {self.pid()}) survived SIGKILL")

    def forget(self) -> None:
        if self.popen is not None:
            try:
                self.popen.wait(timeout=KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            self.pid_path.unlink()
        except FileNotFoundError:
            pass

    def log_tail(self, max_bytes: int = 3000) -> str:
        try:
            return self.log_path.read_bytes()[-max_bytes:].decode(errors="replace")
        except OSError:
            return ""

