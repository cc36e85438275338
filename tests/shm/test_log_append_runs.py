"""A multi-batch append writes each run of batches that stay in one segment with one
``pwrite`` (``Segment.append_run``). Every batch is still the roll's to decide as if it
were appended alone: by size, by time, and by a full index."""
from __future__ import annotations

import random

import pytest

from shm import batch
from shm.config import INDEX_ENTRY_BYTES, LogConfig
from shm.log import Log


def some_batches(rng: random.Random, count: int) -> list[bytes]:
    out, offset, timestamp = [], 0, 1_700_000_000_000
    for _ in range(count):
        n = rng.randint(1, 12)
        timestamp += rng.choice([0, 0, 3, 20])
        out.append(bytes(batch.build_batch(
            [b"v" * rng.randint(0, 200) for _ in range(n)], timestamps_ms=timestamp,
            base_offset=offset, partition_leader_epoch=0)))
        offset += n
    return out


def layout(log: Log) -> list:
    return [(s.base_offset, s.size_bytes, s.next_offset,
             [s.offset_index.entry(i) for i in range(s.offset_index.count)],
             [s.time_index.entry(i) for i in range(s.time_index.count)])
            for s in log.segments]


@pytest.mark.parametrize("seed", range(12))
def test_one_append_of_many_batches_lays_out_the_log_as_one_append_each(
        tmp_path, cluster_id, seed):
    rng = random.Random(seed)
    config = LogConfig(segment_bytes=rng.choice([2048, 4096, 16384]),
                       index_interval_bytes=rng.choice([1, 300, 4096]),
                       index_size_max_bytes=INDEX_ENTRY_BYTES * rng.choice([4, 5, 7, 1000]),
                       roll_ms=rng.choice([10, 50, 10**9]), retention_ms=-1)
    batches = some_batches(rng, 60)
    cuts = sorted(rng.sample(range(1, 60), rng.randint(0, 6)))
    one = Log.open(str(tmp_path / "one"), "runs", 0, config, cluster_id=cluster_id,
                   broker_id=1)
    many = Log.open(str(tmp_path / "many"), "runs", 0, config, cluster_id=cluster_id,
                    broker_id=2)
    try:
        now = 1_700_000_000_000
        for data in batches:
            one.append_as_follower(data, now_ms=now)
        for start, end in zip([0] + cuts, cuts + [60]):
            many.append_as_follower(b"".join(batches[start:end]), now_ms=now)
        assert len(one.segments) > 1
        assert layout(many) == layout(one)
        assert many.log_end_offset == one.log_end_offset == sum(
            batch.read_header(data).record_count for data in batches)
        for segment_one, segment_many in zip(one.segments, many.segments):
            assert bytes(segment_many.view(0, segment_many.size_bytes)) == \
                bytes(segment_one.view(0, segment_one.size_bytes))
    finally:
        one.delete()
        many.delete()
