"""Kafka's protocol by hand, for the listener's bad-input tests: requests built with the
codec (``node.kafka.protocol``) on plain sockets, and magic-v2 record batches built here,
independently of the broker's own record code (so that they can judge it).

Batch layout (Kafka's DefaultRecordBatch): baseOffset i64, batchLength i32,
partitionLeaderEpoch i32, magic i8, crc u32 (CRC-32C of everything after it),
attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
producerEpoch i16, baseSequence i32, record count i32, then the records (zigzag varints).
"""
from __future__ import annotations

import itertools
import socket
import struct
import time

import crc32c

from node.kafka.protocol import (KafkaProtocolError, RequestHeader, decode_response,
                                 encode_request)
from node.kafka.protocol import messages as m

BATCH_HEADER = struct.Struct(">qiibIhiqqqhii")
CRC_FROM = 21         # attributes: the CRC covers the batch from here
LENGTH_FROM = 12      # batchLength counts the bytes from partitionLeaderEpoch on
SOCKET_TIMEOUT_S = 30.0
_correlation = itertools.count(1)


def varint(n: int) -> bytes:
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(b: bytes | None) -> bytes:
    return varint(-1) if b is None else varint(len(b)) + b


def record_batch(values: list[bytes], *, key: bytes | None = None, timestamp_ms: int = 0,
                 magic: int = 2) -> bytes:
    """One uncompressed batch of ``values`` (base offset 0, no producer id)."""
    records = b""
    for delta, value in enumerate(values):
        body = (b"\x00" + varint(0) + varint(delta) + _bytes_field(key) + _bytes_field(value)
                + varint(0))
        records += varint(len(body)) + body
    n = len(values)
    header = bytearray(BATCH_HEADER.pack(0, 0, 0, magic, 0, 0, n - 1, timestamp_ms,
                                         timestamp_ms, -1, -1, -1, n))
    batch = header + records
    struct.pack_into(">i", batch, 8, len(batch) - LENGTH_FROM)
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_FROM:])))
    return bytes(batch)


def batch_shapes(records) -> list[tuple[int, int]]:
    """(attributes, record count) of each whole batch in ``records`` (a Fetch answer's;
    attribute bits 0-2: the codec)."""
    data, pos, out = bytes(records or b""), 0, []
    while len(data) - pos >= BATCH_HEADER.size:
        length, = struct.unpack_from(">i", data, pos + 8)
        if pos + LENGTH_FROM + length > len(data):
            break   # a partial batch at the end of a fetch
        fields = BATCH_HEADER.unpack_from(data, pos)
        out.append((fields[5], fields[12]))    # attributes, recordCount
        pos += LENGTH_FROM + length
    return out


def valid_batches_count(records) -> int | None:
    """How many records ``records`` (a Produce partition's) holds when every batch in it
    is a well-formed magic-2 batch with a correct CRC; None otherwise."""
    if records is None:
        return None
    data = bytes(records)
    pos, count = 0, 0
    while pos < len(data):
        if len(data) - pos < BATCH_HEADER.size:
            return None
        (_, length, _, magic, crc, _, last_delta, _, _, _, _, _,
         n) = BATCH_HEADER.unpack_from(data, pos)
        end = pos + LENGTH_FROM + length
        if magic != 2 or length < BATCH_HEADER.size - LENGTH_FROM or end > len(data):
            return None
        if crc32c.crc32c(data[pos + CRC_FROM:end]) != crc or n < 0 or last_delta != n - 1:
            return None
        count += n
        pos = end
    return count if data else None


# ------------------------------------------------------------------ requests
def frame(api_key: int, version: int, request, client_id: str | None = "fuzz") -> bytes:
    return encode_request(RequestHeader(api_key, version, next(_correlation), client_id),
                          request)


def connect(address: str, timeout_s: float = SOCKET_TIMEOUT_S) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout_s)


def read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed answer (its payload), or None when the peer closed first."""
    head = _read_exactly(sock, 4)
    if head is None:
        return None
    size, = struct.unpack(">i", head)
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def call(address: str, api_key: int, version: int, request):
    """Send one request on a new connection; its decoded answer."""
    with connect(address) as sock:
        sock.sendall(frame(api_key, version, request))
        payload = read_frame(sock)
        assert payload is not None, f"the broker closed the connection instead of answering " \
                                    f"api {api_key} v{version}"
        try:
            return decode_response(api_key, version, payload)[1]
        except KafkaProtocolError as e:
            raise AssertionError(f"undecodable answer to api {api_key} v{version}: {e}") from e


def drain(sock: socket.socket, quiet_s: float, total_s: float) -> tuple[bytes, bool]:
    """Whatever the peer sends until it closes (True) or is quiet for ``quiet_s``, at most
    ``total_s``."""
    got = bytearray()
    deadline = time.monotonic() + total_s
    while time.monotonic() < deadline:
        sock.settimeout(min(quiet_s, max(0.01, deadline - time.monotonic())))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return bytes(got), False
        except ConnectionError:
            return bytes(got), True
        if not chunk:
            return bytes(got), True
        got += chunk
    return bytes(got), False


def api_versions(address: str) -> dict[int, tuple[int, int]]:
    answer = call(address, 18, 0, m.ApiVersionsRequest())
    assert answer.error_code == 0, answer
    return {a.api_key: (a.min_version, a.max_version) for a in answer.api_keys}


def metadata(address: str, version: int, topics: list[str] | None):
    request = m.MetadataRequest(
        topics=None if topics is None else [m.MetadataRequest.MetadataRequestTopic(name=t)
                                            for t in topics])
    return call(address, 3, version, request)


def latest_offset(address: str, version: int, topic: str, partition: int = 0) -> int:
    """ListOffsets(latest): the partition's high watermark (its log end with RF 1)."""
    request = m.ListOffsetsRequest(replica_id=-1, topics=[m.ListOffsetsRequest.ListOffsetsTopic(
        name=topic, partitions=[m.ListOffsetsRequest.ListOffsetsPartition(
            partition_index=partition, timestamp=-1, current_leader_epoch=-1)])])
    answer = call(address, 2, version, request)
    p = answer.topics[0].partitions[0]
    assert p.error_code == 0, p
    return p.offset


def produce_request(topic: str, records: bytes, acks: int = -1, partition: int = 0):
    return m.ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[
        m.ProduceRequest.TopicProduceData(name=topic, partition_data=[
            m.ProduceRequest.PartitionProduceData(index=partition, records=records)])])


def fetch_request(topic: str, offset: int = 0, max_wait_ms: int = 50, topic_id=None):
    """Fetch from partition 0 (by name; by ``topic_id`` too, which v13+ use instead)."""
    kwargs = {} if topic_id is None else {"topic_id": topic_id}
    return m.FetchRequest(replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1,
                          max_bytes=1 << 20, topics=[m.FetchRequest.FetchTopic(
                              topic=topic, **kwargs, partitions=[m.FetchRequest.FetchPartition(
                                  partition=0, fetch_offset=offset, partition_max_bytes=1 << 20,
                                  current_leader_epoch=-1)])])
