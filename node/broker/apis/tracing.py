"""Traced writes (``bench.perf.latency --breakdown``).

A Produce with "trace": [client send ns] is followed through the leader, each follower's
fetch and the HW advance; its answer carries every stamp (time.monotonic_ns:
CLOCK_MONOTONIC, one clock for every process of a host). Nothing here runs unless such
a request is pending. ``traces`` is the request handlers' table of acks=all writes
waiting for their followers: partition key -> (last offset, the request's trace).
"""
from __future__ import annotations

import time

from node.broker.purgatory import FetchRead, ParkedFetch
from node.wire import protocol

Traces = dict[tuple[str, int], tuple[int, dict]]


def start_trace(value) -> dict | None:
    """A Produce's "trace": [client send ns] -> the trace the broker fills in."""
    if not (isinstance(value, list) and len(value) == 1 and isinstance(value[0], int)):
        raise protocol.ProtocolError('"trace" must be [client send time in ns]')
    return {"send": value[0], "receive": time.monotonic_ns()}


def trace_marks(traces: Traces, fetch: ParkedFetch, read: FetchRead) -> list:
    """[topic, partition, traced offset, answered ns] for every traced write this
    follower fetch carries."""
    marks = []
    for (topic, partition, offset, *_), frame in zip(fetch.entries, read[1]):
        traced = traces.get((topic, partition))
        if traced is not None and len(frame) and offset <= traced[0]:
            marks.append([topic, partition, traced[0], time.monotonic_ns()])
    return marks


def follower_traced(traces: Traces, replica_id: int, marks) -> None:
    """A follower's next fetch echoes the marks with its own stamps: [topic,
    partition, offset, answered, received, appended, sent]."""
    now = time.monotonic_ns()
    if not isinstance(marks, list):
        return
    for mark in marks:
        if not (isinstance(mark, list) and len(mark) == 7):
            continue
        traced = traces.get((mark[0], mark[1]))
        if traced is not None and traced[0] == mark[2]:
            traced[1].setdefault("followers", {})[str(replica_id)] = [*mark[3:], now]
