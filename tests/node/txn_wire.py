"""Driving a partition leader's transaction side by hand over the native wire (tests):
transactional batches built with ``shm.batch.build_batch``, Produce, WriteTxnMarkers
(what a transaction coordinator's broker sends), read_committed Fetch and ListOffsets.
No coordinator is involved: the test plays it."""
from __future__ import annotations

from node.wire import protocol
from shm import batch

READ_UNCOMMITTED, READ_COMMITTED = 0, 1
WRITE_TXN_MARKERS = 27


def txn_batch(values: list[bytes], producer_id: int, epoch: int, sequence: int, *,
              transactional: bool = True) -> bytearray:
    return batch.build_batch(values, producer_id=producer_id, producer_epoch=epoch,
                             base_sequence=sequence, transactional=transactional)


def produce(channel, topic: str, partition: int, data, *, acks: int = -1,
            transactional_id: str | None = None) -> list:
    """The partition's answer: [topic, partition, error, base_offset, log_start, message]."""
    body = {"acks": acks, "timeout_ms": 10_000, "partitions": [[topic, partition]]}
    if transactional_id is not None:
        body["transactional_id"] = transactional_id
    return channel.request(protocol.ApiKey.PRODUCE, body, [data],
                           timeout_ms=30_000).body["partitions"][0]


def write_markers(channel, producer_id: int, epoch: int, commit: bool,
                  partitions: list[tuple[str, int]], coordinator_epoch: int = 0) -> dict:
    """{(topic, partition): error code} of one WriteTxnMarkers with one marker."""
    topics: dict[str, list[int]] = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(partition)
    body = {"markers": [{"producer_id": producer_id, "producer_epoch": epoch,
                         "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                         "topics": [{"name": t, "partition_indexes": ps}
                                    for t, ps in topics.items()]}]}
    answer = channel.request(WRITE_TXN_MARKERS, body, timeout_ms=30_000).body
    assert "error" not in answer, answer
    (marker,) = answer["markers"]
    assert marker["producer_id"] == producer_id
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in marker["topics"] for p in t["partitions"]}


def fetch(channel, topic: str, partition: int, offset: int,
          isolation_level: int = READ_UNCOMMITTED):
    """(result entry, [(batch header, [(offset, value)])]) of one consumer Fetch."""
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
            "isolation_level": isolation_level,
            "partitions": [[topic, partition, offset, -1, 1 << 20]]}
    response = channel.request(protocol.ApiKey.FETCH, body, timeout_ms=30_000)
    entry = response.body["partitions"][0]
    frame = response.frames[0] if response.frames else b""
    data = frame.bytes if hasattr(frame, "bytes") else bytes(frame)
    batches = [(b.header, [(o, v) for o, _, _, v in b.records()])
               for b in batch.parse_batches(data)]
    return entry, batches


def latest_offset(channel, topic: str, partition: int,
                  isolation_level: int = READ_UNCOMMITTED) -> int:
    body = {"replica_id": -1, "isolation_level": isolation_level,
            "partitions": [[topic, partition, protocol.LATEST_TIMESTAMP]]}
    entry = channel.request(protocol.ApiKey.LIST_OFFSETS, body).body["partitions"][0]
    assert entry[2] == 0, entry
    return entry[4]


def committed_values(batches, aborted: list) -> list[bytes]:
    """What a read_committed consumer keeps of ``batches`` ((header, records) pairs in
    offset order): the native consumer's own filter (Kafka's rule: control batches
    dropped, a producer's data from an aborted transaction's first offset to its marker)."""
    from node.client.consumer.fetcher import AbortedFilter
    kept = AbortedFilter(aborted)
    out = []
    for header, records in batches:
        if header.attributes & batch.ATTR_CONTROL:
            kept.control(header)
        elif not kept.drops(header):
            out += [v for _, v in records]
    return out
