"""Replication through shared memory for followers on the leader's host
(``replica.transport=shm``, issue 29): ``manager`` (on the loop), ``plan`` (its pure
decisions), ``doorbell`` (FIFO wake-ups). The slot and the segment reader are in
``shm.replication_slot`` and ``shm.replication_reader``."""
from node.broker.shm_replication.manager import ShmReplication

__all__ = ["ShmReplication"]
