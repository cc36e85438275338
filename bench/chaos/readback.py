"""Reading a chaos run's log back once the workload stops: the final read (every
record of the topic from the log start to the high watermark, over the native
listener; ``final.parquet``) and, with the cluster down, every replica's segment files
below the high watermark (``replicas.parquet``) for the checker's LogMatching. The
teaching scenarios' verdicts read the same way."""
from __future__ import annotations

import time
from pathlib import Path

from node.tools.common import ToolError


def read_log(bootstrap: str, topic: str, partitions: list[int]
             ) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record of ``topic``'s ``partitions`` from the log start to the high
    watermark, as {partition: [(offset, value), ...]}, and the high watermarks. The
    chaos run's final read; the teaching scenarios' verdicts read the same way."""
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    try:
        tps = [(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = {tp.partition if hasattr(tp, "partition") else tp[1]: o
                for tp, o in consumer.end_offsets(tps, timeout_ms=30_000).items()}
        final: dict[int, list] = {p: [] for p in partitions}
        positions = {p: 0 for p in partitions}
        deadline = time.monotonic() + 60
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() > deadline:
                raise ToolError(f"final read stuck at {positions}, ends {ends}")
            for r in consumer.poll(timeout_ms=500):
                if r.offset < ends[r.partition]:
                    final[r.partition].append((r.offset, r.value))
                positions[r.partition] = max(positions[r.partition], r.offset + 1)
            for tp in tps:      # a compacted log may end in a hole below its HW
                if consumer.hole_until(tp) >= ends[tp[1]]:
                    positions[tp[1]] = max(positions[tp[1]], ends[tp[1]])
                # ... or in a transaction marker (a control batch: no record returned,
                # the consumer's position moves past it).
                positions[tp[1]] = max(positions[tp[1]], consumer.position(tp))
        return final, ends
    finally:
        consumer.close()


COMMITTED_QUIET_S = 5.0     # a read_committed final read with no progress this long ends
LSO_SETTLE_S = 30.0         # for open transactions to end (the workers' timeout is 10 s)


def read_committed_log(bootstrap: str, topic: str, partitions: list[int],
                       high_watermarks: dict[int, int] | None = None,
                       settle_s: float = LSO_SETTLE_S
                       ) -> tuple[dict[int, list[tuple[int, bytes]]], dict[int, int]]:
    """Every record of ``topic``'s ``partitions`` a read_committed consumer gets from the
    log start (the transactional run's committed read-back), and the last stable offsets
    it read to. First it waits up to ``settle_s`` for the LSOs (ListOffsets at
    read_committed) to reach ``high_watermarks``: a transaction a killed worker left
    open ends when the coordinator's timeout aborts it. The read ends at the LSOs, or
    after ``COMMITTED_QUIET_S`` without progress: a transaction left open for good
    (Kafka's hanging transaction) holds the LSO, and what lies past it is not
    readable (the checker then finds the writes behind it lost)."""
    from node.client import Consumer
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                        isolation_level="read_committed")
    try:
        tps = [(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning()

        def stable() -> dict[int, int]:
            return {tp[1] if isinstance(tp, tuple) else tp.partition: o
                    for tp, o in consumer.end_offsets(tps, timeout_ms=30_000).items()}
        ends = stable()
        deadline = time.monotonic() + settle_s
        while high_watermarks and time.monotonic() < deadline and \
                any(ends[p] < high_watermarks.get(p, 0) for p in ends):
            time.sleep(0.5)
            ends = stable()
        view: dict[int, list] = {p: [] for p in partitions}
        positions = {p: 0 for p in partitions}
        quiet_since = time.monotonic()
        while any(positions[p] < ends[p] for p in positions):
            if time.monotonic() - quiet_since > COMMITTED_QUIET_S:
                break
            before = dict(positions)
            for r in consumer.poll(timeout_ms=500):
                if r.offset < ends[r.partition]:
                    view[r.partition].append((r.offset, r.value))
            for tp in tps:
                positions[tp[1]] = consumer.position(tp)
            if positions != before:
                quiet_since = time.monotonic()
        return view, ends
    finally:
        consumer.close()


def write_final(path: Path, final: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [(p, o, v) for p, items in sorted(final.items()) for o, v in items]
    pq.write_table(pa.table({"partition": pa.array([r[0] for r in rows], type=pa.int32()),
                             "offset": pa.array([r[1] for r in rows], type=pa.int64()),
                             "value": pa.array([r[2] for r in rows], type=pa.binary())}), path)


def read_replica(cluster, broker_id: int, topic: str, partition: int,
                 end: int) -> list[tuple[int, bytes]]:
    """(offset, value) of one stopped replica's log below ``end``, from its segment files."""
    from shm.batch import parse_batches
    from shm.log import Log

    data_dir = cluster.broker_dir(broker_id) / "logs"
    if not (data_dir / f"{topic}-{partition}").is_dir():
        return []
    log_ = Log.open(str(data_dir), topic, partition, cluster_id=cluster.cluster_id,
                    broker_id=broker_id)
    rows = []
    try:
        position = log_.log_start_offset
        stop = min(end, log_.log_end_offset)
        while position < stop:
            view = log_.read(position, 1 << 20, max_offset=stop)
            if not len(view):
                break
            for batch in parse_batches(bytes(view)):
                rows += [(o, v) for o, _, _, v in batch.records() if o < stop]
                position = batch.header.next_offset
    finally:
        log_.close()
    return rows


def write_replicas(path: Path, cluster, topic: str, ends: dict[int, int]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shm.names import cleanup_cluster
    rows = []
    try:
        for broker_id in cluster.broker_ids:
            for partition, end in sorted(ends.items()):
                rows += [(broker_id, partition, o, v)
                         for o, v in read_replica(cluster, broker_id, topic, partition, end)]
    finally:
        cleanup_cluster(cluster.cluster_id)
    pq.write_table(pa.table({
        "broker": pa.array([r[0] for r in rows], type=pa.int32()),
        "partition": pa.array([r[1] for r in rows], type=pa.int32()),
        "offset": pa.array([r[2] for r in rows], type=pa.int64()),
        "value": pa.array([r[3] for r in rows], type=pa.binary())}), path)
