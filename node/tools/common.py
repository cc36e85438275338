"""What every tool shares: one-line errors, key=value flags, the admin connection, progress.

A tool is ``run(args) -> exit code``. Anything a user can get wrong (a flag, a file, an
unreachable cluster, an unknown topic, a broker's refusal) ends as ONE line on stderr
and a non-zero exit, never a traceback: ``ToolError`` for what the tool detects itself,
``KafkaError`` / ``KafkaTimeoutError`` for what the cluster answers, ``OSError`` for
files. ``guarded(prefix, fn, args)`` does that conversion; anything else is a bug and
keeps its traceback.
"""
from __future__ import annotations

import json
import re
import sys
import time

from node.wire import errors
from node.waiting import poll_until
from node.client import KafkaTimeoutError
from node.config import ConfigError, parse_key_values  # noqa: F401 - the tools' KEY=VALUE

# Limits and timeouts of the tools, in one place.
CONNECT_TIMEOUT_MS = 5_000      # metadata requests: an unreachable cluster fails this fast
ADMIN_TIMEOUT_MS = 30_000       # Kafka's default.api.timeout.ms for admin calls
WAIT_TIMEOUT_S = 120.0          # reassignments and elections the tools wait for
PROGRESS_INTERVAL_S = 2.0       # at most one progress line this often
POLL_INTERVAL_S = 0.1
JSON_FILE_BYTES_MAX = 16 * 1024 * 1024
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2  # 2 for a wrong flag, as argparse


class ToolError(Exception):
    """A problem the user can fix; the message is the whole story, on one line."""


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def one_line_usage_errors(parser, prog: str) -> None:
    """Make ``parser`` report a wrong flag as one line (``prog: error: ...``) instead of
    argparse's usage block; the exit status stays argparse's 2 (bad usage)."""
    def error(message: str):
        sys.stderr.write(f"{prog}: error: {one_line(message)} (see {prog} --help)\n")
        sys.exit(EXIT_USAGE)
    parser.error = error


def guarded(prefix: str, fn, args) -> int:
    """Run ``fn(args)``; user-facing failures become one line ``<prefix><message>``."""
    try:
        return fn(args)
    except (ToolError, ConfigError) as e:
        message = str(e)
    except errors.KafkaError as e:
        message = e.message or e.name
    except KafkaTimeoutError as e:
        message = str(e)
    except OSError as e:
        message = f"{e.strerror or e}: {e.filename}" if e.filename else str(e)
    except KeyboardInterrupt:
        return 130
    sys.stdout.flush()
    sys.stderr.write(prefix + one_line(message) + "\n")
    return EXIT_ERROR


def read_properties_file(path: str) -> dict[str, str]:
    """A Java .properties file (key=value lines, # and ! comments)."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ToolError(f"cannot read {path}: {e.strerror}") from None
    pairs = [line.strip() for line in lines]
    return parse_key_values([p for p in pairs if p and p[0] not in "#!"], path)


def parse_broker_list(text: str, flag: str = "--broker-list") -> list[int]:
    try:
        brokers = [int(b) for b in str(text).split(",") if b.strip()]
    except ValueError:
        raise ToolError(f"{flag} must be comma-separated broker ids, got '{text}'") from None
    if not brokers:
        raise ToolError(f"{flag} is empty")
    duplicates = sorted({b for b in brokers if brokers.count(b) > 1})
    if duplicates:
        raise ToolError("Broker list contains duplicate entries: "
                        + ",".join(map(str, duplicates)))
    return brokers


def read_json_file(path: str, what: str):
    """The parsed JSON of a file the user named, or a one-line ToolError."""
    try:
        with open(path, "rb") as f:
            data = f.read(JSON_FILE_BYTES_MAX + 1)
    except OSError as e:
        raise ToolError(f"cannot read {what} {path}: {e.strerror or e}") from None
    if len(data) > JSON_FILE_BYTES_MAX:
        raise ToolError(f"{what} {path} is larger than {JSON_FILE_BYTES_MAX} bytes")
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise ToolError(f"{what} {path} is not valid JSON: {e}") from None


def tp_name(topic: str, partition: int) -> str:
    """Kafka's TopicPartition.toString."""
    return f"{topic}-{partition}"


def topic_filter(pattern: str | None):
    """Kafka's IncludeList: the --topic value is a regular expression matched against the
    whole name (',' separates alternatives); None matches everything."""
    if pattern is None:
        return lambda name: True
    text = pattern.strip().replace(",", "|").replace(" ", "").strip("\"'")
    try:
        regex = re.compile(text)
    except re.error as e:
        raise ToolError(f"--topic '{pattern}' is not a valid regular expression: {e}") from None
    return lambda name: regex.fullmatch(name) is not None


# ----------------------------------------------------------------- cluster access

def open_admin(bootstrap_server: str | None, timeout_ms: int = CONNECT_TIMEOUT_MS):
    """An Admin client whose first metadata answer has been received: an unreachable
    cluster fails here, within ``timeout_ms``, as a ToolError."""
    from node.client.admin import Admin

    if not bootstrap_server:
        raise ToolError("Missing required argument \"[bootstrap-server]\"")
    try:
        admin = Admin(bootstrap_server, request_timeout_ms=timeout_ms, client_id="minikafka-tool")
    except ValueError as e:
        raise ToolError(f"--bootstrap-server: {e}") from None
    try:
        admin.describe_cluster()
    except (errors.KafkaError, KafkaTimeoutError) as e:
        admin.close()
        detail = e.message if isinstance(e, errors.KafkaError) else str(e)
        raise ToolError(f"cannot reach the cluster at {bootstrap_server} ({detail})") from None
    return admin


def check_topics_exist(admin, topics) -> None:
    known = set(admin.list_topics())
    missing = [t for t in topics if t not in known]
    if missing:
        raise ToolError(f"Topic '{missing[0]}' does not exist as expected")


class Progress:
    """Progress lines on stderr for a long wait, at most one per interval (and on change)."""

    def __init__(self, what: str, interval_s: float = PROGRESS_INTERVAL_S, stream=None):
        self.what = what
        self.interval_s = interval_s
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.last_line_s = self.started
        self.last = None

    def update(self, done: int, total: int) -> None:
        now = time.monotonic()
        if (done, total) != self.last or now - self.last_line_s >= self.interval_s:
            if self.last is not None or done < total:
                self.stream.write(f"{self.what}: {done}/{total} done "
                                  f"({now - self.started:.1f} s)\n")
                self.stream.flush()
            self.last = (done, total)
            self.last_line_s = now


def wait_until(predicate, timeout_s: float, what: str):
    """Poll ``predicate()`` until truthy (returns it); ToolError after ``timeout_s``."""
    return poll_until(predicate, timeout_s, what, interval_s=POLL_INTERVAL_S,
                      error=ToolError)
