"""Choosing a partition for a record, as Kafka's producer does. Pure: no I/O, no clock.

- A record with an explicit partition goes there.
- A keyed record goes to ``to_positive(murmur2(key)) % num_partitions``: Kafka's
  ``Utils.murmur2`` (MurmurHash2, 32-bit, seed 0x9747b28c) and ``Utils.toPositive``
  (``& 0x7fffffff``), so a key lands on the same partition number as with the Java
  client (checked against Kafka's own UtilsTest vectors).
- An unkeyed record uses the sticky partitioner (KIP-480): every record goes to the
  same "sticky" partition until the producer closes a batch for it (``on_new_batch``),
  then a new one is chosen among the partitions that have a leader, never the same one
  twice in a row when there is a choice. The choice comes from a seeded
  ``random.Random`` owned by the partitioner (deterministic for a given seed).
"""
from __future__ import annotations

import random

MURMUR2_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK32 = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2``: a signed 32-bit int (Java ``int``)."""
    length = len(data)
    h = (MURMUR2_SEED ^ length) & _MASK32
    whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK32
        k ^= k >> 24
        k = (k * _M) & _MASK32
        h = (h * _M) & _MASK32
        h ^= k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    assert num_partitions >= 1, num_partitions
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """KIP-480's sticky partition choice for unkeyed records, per topic."""

    def __init__(self, seed: int | None = 0) -> None:
        self._random = random.Random(seed)
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, num_partitions: int,
                  available: list[int] | None = None) -> int:
        """The current sticky partition of ``topic`` (chosen on first use)."""
        current = self._sticky.get(topic)
        if current is None or current >= num_partitions:
            current = self._choose(topic, num_partitions, available, previous=None)
        return current

    def on_new_batch(self, topic: str, num_partitions: int,
                     available: list[int] | None = None) -> int:
        """A batch of the sticky partition was closed: move to another partition."""
        return self._choose(topic, num_partitions, available,
                            previous=self._sticky.get(topic))

    def _choose(self, topic: str, num_partitions: int, available: list[int] | None,
                previous: int | None) -> int:
        assert num_partitions >= 1, num_partitions
        candidates = [p for p in (available or range(num_partitions)) if p < num_partitions]
        if not candidates:
            candidates = list(range(num_partitions))
        if len(candidates) > 1 and previous in candidates:
            candidates.remove(previous)
        choice = candidates[self._random.randrange(len(candidates))]
        self._sticky[topic] = choice
        return choice


def choose_partition(key: bytes | None, num_partitions: int, sticky: StickyPartitioner,
                     topic: str, available: list[int] | None = None) -> int:
    """The partition of a record without an explicit partition."""
    if key is not None:
        return partition_for_key(key, num_partitions)
    return sticky.partition(topic, num_partitions, available)
