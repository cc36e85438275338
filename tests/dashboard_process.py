"""A ``minikafka dashboard`` process for tests: start it, read the address (and token)
it prints, stop it. Used by the dashboard's own tests and by the relative-path and
installed-wheel tests."""
from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

START_TIMEOUT_S = 60
STOP_TIMEOUT_S = 60


@dataclass
class Dashboard:
    proc: subprocess.Popen
    url: str                 # http://127.0.0.1:PORT/
    token: str | None        # from the printed address, None with --no-token
    printed: str             # what it printed up to its address

    @property
    def page(self) -> str:
        """The address a person opens: with its token, as printed."""
        return self.url + (f"?token={quote(self.token, safe='')}" if self.token else "")

    def at(self, path: str) -> str:
        """``path`` on the dashboard, with the token in the query (GET only)."""
        return self.url + path + (f"?token={quote(self.token, safe='')}" if self.token else "")

    @property
    def port(self) -> int:
        return urlsplit(self.url).port

    @property
    def auth(self) -> dict:
        return {"Authorization": f"token {self.token}"}


def start_dashboard(*args, command=None, cwd=None, env=None) -> Dashboard:
    """Start ``command`` (default: ``python -m bench.cli``) ``dashboard --port 0 ARGS``
    and wait for the address it prints."""
    prefix = list(command) if command is not None else [sys.executable, "-m", "bench.cli"]
    proc = subprocess.Popen([*prefix, "dashboard", "--port", "0", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    printed = ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        printed += line
        found = re.search(r"(http://127\.0\.0\.1:\d+/)(\?token=(\S+))?", line or "")
        if found:
            threading.Thread(target=proc.stdout.read, daemon=True).start()  # drain
            token = unquote(found.group(3)) if found.group(3) else None
            return Dashboard(proc, found.group(1), token, printed)
        if proc.poll() is not None:
            raise AssertionError(f"the dashboard exited: {printed}{proc.stdout.read()}")
    proc.kill()
    raise AssertionError("the dashboard did not print its address")


def stop_dashboard(dashboard: Dashboard) -> None:
    proc = dashboard.proc
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
