"""Requests that wait: produce requests for their acks, fetches for their bytes.

Kafka keeps such requests in "purgatories"; here they are two small structures owned by
the loop.

- ``ProduceRequest``: one Produce request, answered once every partition entry has
  completed (an error at once, acks 0/1 after the append, acks=all when the core's
  ``CompleteProduce`` says so). Completions that happen while the request's handler
  still runs wait for its end, so the answer goes out exactly once.
- ``FetchPurgatory`` (Kafka's DelayedFetch): a fetch with fewer than ``min_bytes``
  available is parked until new bytes arrive on one of its partitions, its wait
  expires, or one of its partitions changes leadership. Followers count bytes up to
  the LEO and consumers up to the HW, so an HW move alone completes a parked consumer
  fetch but never a parked follower fetch, as in Kafka: the follower learns the new HW
  only with its next response (the lag the pre-KIP-101 HW-truncation loss needs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from node.broker import limits
from node.broker.loop import EventLoop


@dataclass(eq=False)
class ProduceRequest:
    identity: bytes
    correlation_id: int
    acks: int
    results: list           # [topic, partition, error, base_offset, log_start, message]
    remaining: int
    in_handler: bool = True
    answered: bool = False
    answer_acks_0: bool = False     # answer even with acks=0 (node.broker.apis.produce)
    # A traced request (bench.perf.latency --breakdown): the CLOCK_MONOTONIC ns stamps of its
    # path, answered with it. None, and never looked at, otherwise.
    trace: dict | None = None

    def complete(self, index: int, error: int, base_offset: int, log_start: int,
                 message: str | None = None) -> None:
        entry = self.results[index]
        assert entry[2] is None, ("completed twice", entry)
        entry[2], entry[3], entry[4], entry[5] = error, -1 if error else base_offset, \
            log_start, message
        self.remaining -= 1
        assert self.remaining >= 0

    def ready(self) -> bool:
        """True once, when the answer may go out."""
        if self.remaining or self.in_handler or self.answered:
            return False
        self.answered = True
        return True


@dataclass(eq=False)
class ParkedFetch:
    identity: bytes
    correlation_id: int
    replica_id: int
    min_bytes: int
    max_bytes: int
    entries: list           # [topic, partition, offset, leader_epoch, partition_max_bytes]
    isolation_level: int = 0    # 1: read_committed (below the LSO; node.broker.apis.fetch)
    timer: int | None = None
    done: bool = False

    @property
    def from_follower(self) -> bool:
        return self.replica_id >= 0


# What ``read`` returns: (partition results, batch frames, bytes, any partition error).
FetchRead = tuple[list, list, int, bool]


class FetchPurgatory:
    def __init__(self, loop: EventLoop, read: Callable[[ParkedFetch], FetchRead],
                 answer: Callable[[ParkedFetch, FetchRead], None]) -> None:
        self.loop = loop
        self.read = read
        self.answer = answer
        self._waiting: dict[tuple[str, int], set[ParkedFetch]] = {}
        self._by_peer: dict[object, set[ParkedFetch]] = {}   # identity -> its parked
        self.count = 0

    @property
    def full(self) -> bool:
        return self.count >= limits.PARKED_FETCHES_MAX

    def may_park(self, identity) -> bool:
        """Room for one more parked fetch, overall and for this connection."""
        return self.count < limits.PARKED_FETCHES_MAX and \
            len(self._by_peer.get(identity, ())) < limits.PARKED_FETCHES_PER_CONNECTION_MAX

    def forget_peer(self, identity) -> int:
        """The connection went away: drop its parked fetches unanswered; how many."""
        dropped = self._by_peer.pop(identity, set())
        for fetch in dropped:
            fetch.done = True
            self.count -= 1
            self.loop.cancel(fetch.timer)
            self._unwait(fetch)
        return len(dropped)

    def _unwait(self, fetch: "ParkedFetch") -> None:
        for topic, partition, *_ in fetch.entries:
            waiting = self._waiting.get((topic, partition))
            if waiting is not None:
                waiting.discard(fetch)
                if not waiting:
                    del self._waiting[(topic, partition)]

    def park(self, fetch: ParkedFetch, max_wait_ms: int) -> None:
        for topic, partition, *_ in fetch.entries:
            self._waiting.setdefault((topic, partition), set()).add(fetch)
        self._by_peer.setdefault(fetch.identity, set()).add(fetch)
        self.count += 1
        fetch.timer = self.loop.call_later(max_wait_ms, lambda: self.complete(fetch))

    def complete(self, fetch: ParkedFetch, read: FetchRead | None = None) -> None:
        """Answer a parked fetch (with ``read`` if one was just made)."""
        if fetch.done:
            return
        fetch.done = True
        self.count -= 1
        self.loop.cancel(fetch.timer)
        self._unwait(fetch)
        mine = self._by_peer.get(fetch.identity)
        if mine is not None:
            mine.discard(fetch)
            if not mine:
                del self._by_peer[fetch.identity]
        self.answer(fetch, read if read is not None else self.read(fetch))

    def wake(self, key: tuple[str, int], *, leo_moved: bool) -> None:
        """New bytes on ``key`` (LEO moved: everyone) or a new HW (consumers only)."""
        waiting = self._waiting.get(key)
        if not waiting:
            return
        done = []
        for fetch in waiting:
            if fetch.from_follower and not leo_moved:
                continue  # an HW move alone brings a follower nothing
            read = self.read(fetch)
            if read[2] >= fetch.min_bytes or read[3]:
                done.append((fetch, read))
        # Every read first, then the answers back to back (the followers of an acks=all
        # write get it at nearly the same time).
        for fetch, read in done:
            self.complete(fetch, read)

    def release(self, key: tuple[str, int]) -> None:
        """``key`` changed leadership: answer every fetch parked on it now."""
        for fetch in list(self._waiting.get(key, ())):
            self.complete(fetch)
