"""The source's read plan, pure: offset ranges split up to ``minPartitions`` and dealt
into at most ``maxPartitions`` Spark tasks (``node.spark.source``)."""
from __future__ import annotations

import heapq

SPLITS_MAX = 10_000      # no read is split into more input partitions than this


def split(ranges: list[tuple[str, int, int, int]], min_partitions: int | None
          ) -> list[tuple[str, int, int, int]]:
    """Halve the largest range until there are at least ``min_partitions`` (or every
    range is one record); empty ranges are dropped. Pure."""
    out = [r for r in ranges if r[3] > r[2]]
    if not min_partitions or len(out) >= min_partitions:
        return out
    heap = [(-(end - start), i, (topic, partition, start, end))
            for i, (topic, partition, start, end) in enumerate(out)]
    heapq.heapify(heap)
    counter = len(heap)
    while len(heap) < min(min_partitions, SPLITS_MAX):
        size, _, (topic, partition, start, end) = heap[0]
        if -size < 2:
            break
        heapq.heappop(heap)
        middle = start + (end - start) // 2
        for piece in ((topic, partition, start, middle), (topic, partition, middle, end)):
            heapq.heappush(heap, (-(piece[3] - piece[2]), counter, piece))
            counter += 1
    return sorted(item for _, _, item in heap)


def group(ranges: list, groups: int | None) -> list[list]:
    """Deal ``ranges`` (anything with ``topic``, ``partition``, ``start``, ``end``) into
    at most ``groups`` lists of about equal records, largest first, each to the lightest
    list; each list in offset order. One Spark task then reads a list. Pure."""
    if not groups or groups >= len(ranges):
        return [[r] for r in ranges]
    assert groups >= 1
    heap = [(0, i, []) for i in range(groups)]
    for r in sorted(ranges, key=lambda r: r.end - r.start, reverse=True):
        size, i, members = heapq.heappop(heap)
        members.append(r)
        heapq.heappush(heap, (size + r.end - r.start, i, members))
    return [sorted(m, key=lambda r: (r.topic, r.partition, r.start))
            for _, _, m in sorted(heap, key=lambda h: h[1]) if m]
