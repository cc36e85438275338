"""The fetch purgatory's per-connection bound and what a closed connection leaves."""
from __future__ import annotations

from node.broker import limits
from node.broker.loop import EventLoop
from node.broker.purgatory import FetchPurgatory, ParkedFetch


def _fetch(identity, i):
    return ParkedFetch(identity, i, -1, 10**9, 1 << 20, [["t", 0, 0, -1, 1 << 20]])


def test_one_connection_parks_at_most_its_share_and_a_closed_one_leaves_nothing():
    loop = EventLoop()
    answered = []
    purgatory = FetchPurgatory(loop, read=lambda f: ([], [], 0, False),
                               answer=lambda f, read: answered.append(f.correlation_id))
    try:
        parked = 0
        for i in range(limits.PARKED_FETCHES_PER_CONNECTION_MAX + 5):
            if purgatory.may_park("a"):
                purgatory.park(_fetch("a", i), 60_000)
                parked += 1
        assert parked == limits.PARKED_FETCHES_PER_CONNECTION_MAX
        assert purgatory.may_park("b")            # another connection still may
        purgatory.park(_fetch("b", 100), 60_000)
        assert purgatory.forget_peer("a") == parked
        assert purgatory.count == 1 and purgatory.may_park("a")
        purgatory.release(("t", 0))               # a leadership change answers the rest
        assert answered == [100]                  # nothing for the closed connection
        assert purgatory.forget_peer("a") == 0 and purgatory.count == 0
    finally:
        loop.close()
