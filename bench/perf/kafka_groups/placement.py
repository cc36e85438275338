"""Where Kafka places a group: its ``__consumer_offsets`` partition."""
from __future__ import annotations

_INT_MIN = -(1 << 31)


def coordinator_partition(group: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(group.hashCode()) % partitions``: Java's String.hashCode over
    UTF-16 code units (signed 32-bit), and Utils.abs, Math.abs with Integer.MIN_VALUE
    giving 0 (not the producer's ``& 0x7fffffff``: they differ for a negative hash)."""
    h = 0
    data = group.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    signed = h - (1 << 32) if h & 0x80000000 else h
    return (0 if signed == _INT_MIN else abs(signed)) % partitions
