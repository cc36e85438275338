"""Admin answers that wait for this broker's metadata cache, as Kafka's
DelayedCreatePartitions and DelayedDeleteTopics: CreateTopics and CreatePartitions are
answered once every partition they made has a leader in the cache (what the controller
last told this broker), DeleteTopics once the topics are gone from it, or at
``timeout_ms`` with REQUEST_TIMED_OUT for the topics not done (Kafka's answer then).

Kafka's rules for when not to wait: ``timeout_ms`` <= 0, ``validate_only``, or nothing
accepted. At most ``ADMIN_WAITS_MAX`` answers wait; more are answered at once.
Checked after every UpdateMetadata (``check``); each waits on one loop timer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from node.broker import limits
from node.broker.metadata_cache import MetadataCache
from node.wire.errors import ErrorCode
from node.wire.protocol import ApiKey


@dataclass(eq=False)
class _Waiter:
    identity: object
    correlation_id: int
    api_key: int
    body: dict                          # the native answer; entries [name, error, message]
    targets: dict[str, int]             # topic -> partitions it must have (0: gone)
    timer: int | None = None
    done: bool = field(default=False)


def _targets(api_key: int, request: dict, answer: dict) -> dict[str, int]:
    """The topics accepted, and what the cache must show for each."""
    accepted = [e[0] for e in answer.get("topics", []) if e[1] == ErrorCode.NONE]
    if api_key == ApiKey.CREATE_TOPICS:
        counts = answer.get("partition_counts", {})
        return {t: counts[t] for t in accepted if t in counts}
    if api_key == ApiKey.CREATE_PARTITIONS:
        totals = {e[0]: e[1] for e in request.get("topics", [])
                  if isinstance(e, list) and len(e) == 3}
        return {t: totals[t] for t in accepted if isinstance(totals.get(t), int)}
    if api_key == ApiKey.DELETE_TOPICS:
        return {t: 0 for t in accepted}
    return {}


def _reached(metadata: MetadataCache, topic: str, partitions: int) -> bool:
    parts = metadata.topics.get(topic)
    if partitions == 0:
        return not parts
    return parts is not None and len(parts) >= partitions and \
        all(p.leader >= 0 for p in parts.values())


class AdminWaits:
    def __init__(self, loop, metadata: MetadataCache,
                 send_response: Callable[..., None]) -> None:
        self.loop = loop
        self.metadata = metadata
        self.send_response = send_response
        self.waiting: list[_Waiter] = []

    def answer(self, identity, request, answer: dict) -> None:
        """Send ``answer`` to the native ``request`` now, or once the cache shows it."""
        body = request.body
        timeout_ms = body.get("timeout_ms")
        targets = {}
        if isinstance(timeout_ms, int) and timeout_ms > 0 and \
                not body.get("validate_only") and len(self.waiting) < limits.ADMIN_WAITS_MAX:
            targets = {t: n for t, n in _targets(request.api_key, body, answer).items()
                       if not _reached(self.metadata, t, n)}
        if not targets:
            self.send_response(identity, request.correlation_id, request.api_key, answer)
            return
        waiter = _Waiter(identity, request.correlation_id, request.api_key, answer, targets)
        waiter.timer = self.loop.call_later(min(timeout_ms, limits.ADMIN_WAIT_MS_MAX),
                                            lambda: self._expire(waiter))
        self.waiting.append(waiter)

    def check(self) -> None:
        """After an UpdateMetadata: answer what the cache now shows."""
        if not self.waiting:
            return
        for waiter in list(self.waiting):
            waiter.targets = {t: n for t, n in waiter.targets.items()
                              if not _reached(self.metadata, t, n)}
            if not waiter.targets:
                self.loop.cancel(waiter.timer)
                self._finish(waiter)

    def _expire(self, waiter: _Waiter) -> None:
        if waiter.done:
            return
        late = set(waiter.targets)
        waiter.body["topics"] = [
            [name, ErrorCode.REQUEST_TIMED_OUT, "Timed out waiting for the change to reach "
                                                "the brokers' metadata"]
            if name in late else [name, code, message]
            for name, code, message in waiter.body["topics"]]
        self._finish(waiter)

    def _finish(self, waiter: _Waiter) -> None:
        waiter.done = True
        self.waiting.remove(waiter)
        self.send_response(waiter.identity, waiter.correlation_id, waiter.api_key,
                           waiter.body)
