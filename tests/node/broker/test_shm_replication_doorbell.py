"""Doorbells (node.broker.shm_replication.doorbell): FIFOs in /dev/shm that wake a
broker's poller; rung by name, in one process here."""
from __future__ import annotations

import os
import select

from node.broker.shm_replication.doorbell import Doorbell, Ringer, bell_path


def readable(fd: int, timeout_s: float = 0.0) -> bool:
    return bool(select.select([fd], [], [], timeout_s)[0])


def test_rings_wake_the_reader_and_many_rings_drain_as_one(cluster_id):
    bell = Doorbell(cluster_id, 3)
    ringer = Ringer(cluster_id)
    try:
        assert not readable(bell.fd)
        assert ringer.ring(3) and ringer.ring(3)
        assert readable(bell.fd, 1.0)
        assert bell.drain() == 2
        assert not readable(bell.fd) and bell.drain() == 0
    finally:
        ringer.close()
        bell.close()
    assert not os.path.exists(bell_path(cluster_id, 3))


def test_a_missing_or_dead_bell_is_not_rung_and_a_restarted_one_is(cluster_id):
    ringer = Ringer(cluster_id)
    try:
        assert not ringer.ring(4)                 # no such broker (or it uses Fetch)
        bell = Doorbell(cluster_id, 4)
        assert ringer.ring(4)
        bell.close()                              # the broker is gone
        assert not ringer.ring(4)
        again = Doorbell(cluster_id, 4)           # ... and back, with a new FIFO
        try:
            assert ringer.ring(4)
            assert readable(again.fd, 1.0) and again.drain() == 1
        finally:
            again.close()
    finally:
        ringer.close()
