"""The partitioner agrees with Kafka's Java client (UtilsTest.testMurmur2 vectors)."""
from __future__ import annotations

import pytest

from node.client.partitioner import (StickyPartitioner, choose_partition, murmur2,
                              partition_for_key, to_positive)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (signed Java ints).
KAFKA_UTILS_TEST_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("key,expected", KAFKA_UTILS_TEST_VECTORS)
def test_murmur2_matches_kafka_utils_test(key, expected):
    assert murmur2(key) == expected


def test_murmur2_covers_every_tail_length():
    # 0..3 trailing bytes take different branches; results are Java ints.
    for n in range(0, 9):
        h = murmur2(bytes(range(n)))
        assert -(1 << 31) <= h < (1 << 31)
    assert len({murmur2(bytes(range(n))) for n in range(9)}) == 9


def test_to_positive_clears_the_sign_bit_not_abs():
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(5) == 5


@pytest.mark.parametrize("key,expected", KAFKA_UTILS_TEST_VECTORS)
def test_keyed_partition_is_positive_hash_modulo(key, expected):
    for n in (1, 3, 6, 7, 100):
        assert partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n


def test_keyed_partition_ignores_the_sticky_partition():
    sticky = StickyPartitioner(seed=1)
    assert choose_partition(b"foobar", 6, sticky, "t") == (-790332482 & 0x7FFFFFFF) % 6


def test_sticky_partition_stays_until_a_new_batch():
    sticky = StickyPartitioner(seed=7)
    first = choose_partition(None, 6, sticky, "t")
    assert all(choose_partition(None, 6, sticky, "t") == first for _ in range(100))
    second = sticky.on_new_batch("t", 6)
    assert second != first
    assert choose_partition(None, 6, sticky, "t") == second


def test_sticky_partition_spreads_over_all_partitions_and_only_available_ones():
    sticky = StickyPartitioner(seed=3)
    seen = {sticky.on_new_batch("t", 4) for _ in range(200)}
    assert seen == {0, 1, 2, 3}
    only = {sticky.on_new_batch("u", 4, available=[1, 3]) for _ in range(50)}
    assert only == {1, 3}
    assert {sticky.on_new_batch("v", 1) for _ in range(5)} == {0}


def test_sticky_partitioner_is_deterministic_for_a_seed():
    a, b = StickyPartitioner(seed=11), StickyPartitioner(seed=11)
    assert [a.on_new_batch("t", 9) for _ in range(20)] == \
        [b.on_new_batch("t", 9) for _ in range(20)]
