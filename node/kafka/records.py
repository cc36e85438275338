"""Kafka's record batch v2 <-> our log's record batch (``shm.batch``). Sans-I/O, pure.

The log keeps its own format (Kafka's 61-byte v2 header, little-endian, and a columnar
body); the Kafka listener converts at the edge:

- ``kafka_to_log(data)``: a Produce partition's ``records`` (one or more Kafka v2
  batches) -> our batches back to back, one per Kafka batch. Kept: producer id, epoch
  and base sequence; base offset and leader epoch as sent (the leader stamps both);
  timestamps (CreateTime; LogAppendTime when ``log_append_time_ms`` is given or the batch
  says so: then every record has that one time, as Kafka's readers see it); keys, values
  (null and empty apart); record headers (byte for byte); the compression codec as a hint;
  the transactional bit (KIP-98; a client's control batch is refused).
- ``log_to_kafka(data)``: our batches as read from the log -> Kafka v2 batches with the
  same offsets, leader epochs, producer fields, timestamps, keys, values and headers,
  compressed with ``compression`` or else each batch's own hint; the transactional and
  control bits kept (a marker, ``shm.control``, is Kafka's control batch: its one
  record's key and value are Kafka's control record key and value, byte for byte).

Kafka's v2 batch (all big-endian; ``DefaultRecordBatch`` in Apache Kafka's clients):

    base_offset i64 | batch_length i32 | partition_leader_epoch i32 | magic i8 (2) |
    crc u32 (CRC-32C of attributes..end) | attributes i16 | last_offset_delta i32 |
    base_timestamp i64 | max_timestamp i64 | producer_id i64 | producer_epoch i16 |
    base_sequence i32 | records_count i32 | records (compressed as attributes say)

Attributes: bits 0-2 codec (``node.kafka.compression``), 0x08 LogAppendTime,
0x10 transactional, 0x20 control, 0x40 delete horizon. The records: ``record_columns``.

Checks, with Kafka's error codes (``RecordError.code``):
- CORRUPT_MESSAGE: a batch shorter than its header or than its batch_length says, a
  wrong CRC, a magic that is no magic at all, records that do not decompress.
- UNSUPPORTED_FOR_MESSAGE_FORMAT: magic 0 or 1 (our log is v2 only).
- UNSUPPORTED_COMPRESSION_TYPE: codec bits 5-7.
- INVALID_RECORD (as Kafka's LogValidator and DefaultRecord): no batch at all, a record
  count of 0 or one that disagrees with last_offset_delta or with the records present,
  control batches from a client, a producer id with a negative base sequence, offset
  deltas other than 0..n-1 in order, a record whose fields do not fill its length.
- MESSAGE_TOO_LARGE: a batch that decompresses, or converts, past ``max_bytes``.
"""
from __future__ import annotations

import itertools
import struct

import numpy as np
from crc32c import crc32c

from node.kafka import compression, record_columns
from node.kafka.compression import CODEC_NONE, CODECS
from node.kafka.record_columns import RecordColumns
from node.wire.errors import ErrorCode
from shm import batch as log_batch
from shm.config import BATCH_BYTES_MAX, BATCH_RECORDS_MAX

KAFKA_HEADER = struct.Struct(">qiibIhiqqqhii")  # shm.batch's fields, big-endian
KAFKA_HEADER_BYTES = KAFKA_HEADER.size
LOG_OVERHEAD_BYTES = 12  # base_offset + batch_length, not counted in batch_length
MAGIC_POSITION = 16
CRC_POSITION = 17
CRC_START = 21
KAFKA_CRC = struct.Struct(">I")
MAGIC_V2 = 2
ATTR_CODEC_MASK = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
# Up to this many records a batch is converted record by record in Python, both ways:
# numpy's fixed cost per call is larger than the per-record work (a linger.ms=0
# producer's single-record batches, a consumer at the end of the log).
SCALAR_RECORDS_MAX = 16
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

assert KAFKA_HEADER_BYTES == log_batch.HEADER_BYTES == 61
assert log_batch.CODEC_ZSTD == compression.CODEC_ZSTD


class RecordError(Exception):
    """Records that Kafka's broker would refuse; ``code`` is the Kafka error code."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = ErrorCode(code)


# ---------------------------------------------------------------- Kafka -> log

def kafka_to_log(data, *, log_append_time_ms: int | None = None,
                 max_bytes: int = BATCH_BYTES_MAX) -> bytearray:
    """One or more Kafka v2 batches -> our batches back to back (see the module doc)."""
    data = bytes(data) if not isinstance(data, bytes) else data
    if not data:
        raise RecordError(ErrorCode.INVALID_RECORD, "no record batch at all")
    size, out = _kafka_batch_to_log(data, 0, log_append_time_ms, max_bytes)
    position = size
    while position < len(data):  # more batches (Kafka's clients send one a partition)
        size, converted = _kafka_batch_to_log(data, position, log_append_time_ms, max_bytes)
        out += converted
        position += size
    return out


def _kafka_batch_to_log(data: bytes, position: int, log_append_time_ms: int | None,
                        max_bytes: int) -> tuple[int, bytearray]:
    available = len(data) - position
    if available < MAGIC_POSITION + 1:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                          f"truncated record batch at byte {position}: {available} bytes")
    magic = data[position + MAGIC_POSITION]
    if magic in (0, 1):
        raise RecordError(ErrorCode.UNSUPPORTED_FOR_MESSAGE_FORMAT,
                          f"record batch magic {magic}: only magic 2 (Kafka 0.11+) is "
                          f"supported")
    if magic != MAGIC_V2:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE, f"invalid record batch magic {magic}")
    if available < KAFKA_HEADER_BYTES:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                          f"truncated record batch at byte {position}: {available} bytes")
    (base_offset, batch_length, leader_epoch, _, crc, attributes, last_offset_delta,
     base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence,
     count) = KAFKA_HEADER.unpack_from(data, position)
    size = batch_length + LOG_OVERHEAD_BYTES
    if size < KAFKA_HEADER_BYTES or size > available:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                          f"record batch at byte {position}: batch_length {batch_length} "
                          f"with {available} bytes present")
    end = position + size
    actual = crc32c(memoryview(data)[position + CRC_START:end])
    if actual != crc:
        raise RecordError(ErrorCode.CORRUPT_MESSAGE,
                          f"record batch at byte {position} fails its CRC: stored "
                          f"{crc:#010x}, computed {actual:#010x}")
    codec = attributes & ATTR_CODEC_MASK
    _check_batch_header(attributes, codec, count, last_offset_delta, producer_id,
                        base_sequence, producer_epoch)
    raw = data[position + KAFKA_HEADER_BYTES:end]
    if codec != compression.CODEC_NONE:
        try:
            raw = bytes(compression.decompress(codec, raw, max_bytes))
        except compression.CompressionError as e:
            code = ErrorCode.MESSAGE_TOO_LARGE if e.too_large else ErrorCode.CORRUPT_MESSAGE
            raise RecordError(code, f"record batch at byte {position}: {e}") from None
    decode = record_columns.decode_scalar if count <= SCALAR_RECORDS_MAX else \
        record_columns.decode
    try:
        columns = decode(raw, count, base_timestamp)
    except ValueError as e:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          f"record batch at byte {position}: {e}") from None
    log_append = log_append_time_ms if log_append_time_ms is not None else \
        (max_timestamp if attributes & ATTR_LOG_APPEND_TIME else None)
    converted = _encode_log_batch(
        columns, log_append, base_offset=max(base_offset, 0),
        partition_leader_epoch=leader_epoch, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, codec_hint=codec,
        transactional=bool(attributes & ATTR_TRANSACTIONAL))
    if len(converted) > max_bytes:
        raise RecordError(ErrorCode.MESSAGE_TOO_LARGE,
                          f"record batch at byte {position} is {len(converted)} bytes in "
                          f"the log's format, over the limit of {max_bytes}")
    return size, converted


def _check_batch_header(attributes: int, codec: int, count: int, last_offset_delta: int,
                        producer_id: int, base_sequence: int, producer_epoch: int = 0) -> None:
    if codec > compression.CODEC_ZSTD:
        raise RecordError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                          f"unknown compression codec {codec}")
    if attributes & ATTR_CONTROL:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          "clients are not allowed to write control records")
    if attributes & ATTR_TRANSACTIONAL and min(producer_id, producer_epoch, base_sequence) < 0:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          f"a transactional record batch needs a producer id, epoch and "
                          f"sequence (got {producer_id}, {producer_epoch}, {base_sequence})")
    if count <= 0:
        raise RecordError(ErrorCode.INVALID_RECORD, f"invalid record count {count}")
    if last_offset_delta != count - 1:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          f"last offset delta {last_offset_delta} for {count} records")
    if count > BATCH_RECORDS_MAX:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          f"{count} records in one batch: the limit is {BATCH_RECORDS_MAX}")
    if producer_id >= 0 and base_sequence < 0:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          f"invalid sequence number {base_sequence} in a batch with "
                          f"producer id {producer_id}")


def _encode_log_batch(columns: RecordColumns, log_append: int | None, **fields) -> bytearray:
    """Our batch for ``columns`` (through shm.batch, the one batch encoder)."""
    small = isinstance(columns.timestamps, list)
    n = len(columns.timestamps)
    if log_append is not None:
        base_timestamp = log_append
        deltas = [0] * n if small else np.zeros(n, "<i4")
    elif small:
        base_timestamp = min(columns.timestamps)
        deltas = [t - base_timestamp for t in columns.timestamps]
    else:
        base_timestamp = int(columns.timestamps.min())
        deltas = columns.timestamps - base_timestamp
    span = max(deltas) if small else int(deltas.max())
    lowest = min(deltas) if small else int(deltas.min())
    if span > INT32_MAX or lowest < 0 or not INT64_MIN <= base_timestamp <= INT64_MAX - span:
        raise RecordError(ErrorCode.INVALID_RECORD,
                          "the timestamps of one batch span more than 2**31 ms or leave "
                          "the 64-bit range")
    layout = _small_layout if small else _layout
    key_offsets, key_validity = layout(columns.key_lengths)
    value_offsets, value_validity = layout(columns.value_lengths)
    header_offsets = None
    if columns.header_lengths is not None:
        header_offsets, _ = layout(columns.header_lengths)
    try:
        return log_batch.encode_columns(
            deltas, key_offsets, columns.key_data, value_offsets, columns.value_data,
            key_validity=key_validity, value_validity=value_validity,
            header_offsets=header_offsets, header_data=columns.header_data,
            base_timestamp=base_timestamp, log_append_time=log_append is not None, **fields)
    except ValueError as e:
        raise RecordError(ErrorCode.MESSAGE_TOO_LARGE, str(e)) from None


def _layout(lengths: np.ndarray):
    """(offsets from 0, validity bitmap or None) for lengths where -1 is null."""
    nulls = lengths < 0
    present = np.maximum(lengths, 0) if bool(nulls.any()) else lengths
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(present, out=offsets[1:])
    if int(offsets[-1]) > INT32_MAX:
        raise RecordError(ErrorCode.MESSAGE_TOO_LARGE, "a batch's keys, values or headers "
                                                       "exceed 2**31 bytes")
    if present is lengths:
        return offsets, None
    return offsets, np.packbits(~nulls, bitorder="little")


def _small_layout(lengths: list):
    """``_layout`` for a few records, in Python."""
    offsets = list(itertools.accumulate((max(x, 0) for x in lengths), initial=0))
    if -1 not in lengths:
        return offsets, None
    bitmap = bytearray((len(lengths) + 7) // 8)
    for i, length in enumerate(lengths):
        if length >= 0:
            bitmap[i >> 3] |= 1 << (i & 7)
    return offsets, bytes(bitmap)


# ---------------------------------------------------------------- log -> Kafka

def log_to_kafka(data, *, compression: str | None = None) -> list:
    """Our batches back to back (as read from the log; or a list of such reads) -> Kafka
    v2 batches, one per batch, as a list of bytes-like objects (the protocol codec writes a list as one
    ``records`` field). ``compression``: "gzip" | "snappy" | "lz4" | "zstd", "none"
    (uncompressed), or None / "producer" (each batch as its producer compressed it, the
    hint). A partial batch at the end (a read cut at a byte limit) is left out, as
    Kafka's clients ignore one; anything else that is not a whole, valid batch raises
    RecordError(CORRUPT_MESSAGE)."""
    codec = _codec_named(compression)
    if isinstance(data, (list, tuple)):  # several log reads: each holds whole batches
        return [kafka for part in data for kafka in log_to_kafka(part, compression=compression)]
    out = []
    position = 0
    end = len(data)
    while end - position >= log_batch.PREFIX.size:
        _, batch_length = log_batch.PREFIX.unpack_from(data, position)
        if batch_length >= 0 and position + batch_length + LOG_OVERHEAD_BYTES > end:
            break  # a partial batch at the end
        try:
            columns = log_batch.read_columns(data, position)
        except log_batch.CorruptRecordError as e:
            raise RecordError(ErrorCode.CORRUPT_MESSAGE, f"log batch at byte {position}: "
                                                         f"{e}") from None
        out.append(_log_batch_to_kafka(columns, codec))
        position += columns.header.size_bytes
    return out


def _codec_named(name: str | None) -> int | None:
    """Kafka's compression.type values -> a codec, or None for "as the producer did"."""
    if name is None or name.lower() == "producer":
        return None
    if name.lower() in ("none", "uncompressed"):
        return CODEC_NONE
    if name.lower() not in CODECS:
        raise ValueError(f"unknown compression type {name!r}")
    return CODECS[name.lower()]


def _log_batch_to_kafka(c: log_batch.Columns, codec: int | None):
    h = c.header
    attributes = h.attributes & (log_batch.ATTR_CODEC_MASK | log_batch.ATTR_LOG_APPEND_TIME |
                                 ATTR_TRANSACTIONAL | ATTR_CONTROL)
    if codec is not None:
        attributes = (attributes & ~ATTR_CODEC_MASK) | codec
    if h.record_count <= SCALAR_RECORDS_MAX:
        columns = RecordColumns(
            c.timestamp_deltas.tolist(), _small_lengths(c.key_offsets, c.key_validity),
            c.key_data, _small_lengths(c.value_offsets, c.value_validity), c.value_data,
            None if c.header_offsets is None else _small_lengths(c.header_offsets, None),
            c.header_data)
        records = record_columns.encode_scalar(columns, 0)
    else:
        columns = RecordColumns(
            c.timestamp_deltas.astype(np.int64), _lengths(c.key_offsets, c.key_validity),
            c.key_data, _lengths(c.value_offsets, c.value_validity), c.value_data,
            None if c.header_offsets is None else np.diff(c.header_offsets).astype(np.int64),
            c.header_data)
        records = record_columns.encode(columns, 0)
    # (The columns' "timestamps" are our deltas: Kafka's deltas from the same base.)
    if attributes & ATTR_CODEC_MASK:
        records = compression.compress(attributes & ATTR_CODEC_MASK, records)
    out = bytearray(KAFKA_HEADER_BYTES)
    out += records
    KAFKA_HEADER.pack_into(out, 0, h.base_offset, len(out) - LOG_OVERHEAD_BYTES,
                           h.partition_leader_epoch, MAGIC_V2, 0, attributes,
                           h.last_offset_delta, h.base_timestamp, h.max_timestamp,
                           h.producer_id, h.producer_epoch, h.base_sequence, h.record_count)
    KAFKA_CRC.pack_into(out, CRC_POSITION, crc32c(memoryview(out)[CRC_START:]))
    return out


def _lengths(offsets: np.ndarray, validity) -> np.ndarray:
    """Per record: its length, -1 where the validity bitmap says null."""
    lengths = np.diff(offsets).astype(np.int64)
    if validity is not None:
        n = len(lengths)
        present = np.unpackbits(np.frombuffer(validity, np.uint8), count=n,
                                bitorder="little").astype(bool)
        lengths[~present] = -1
    return lengths


def _small_lengths(offsets: np.ndarray, validity) -> list[int]:
    """``_lengths`` for a few records, in Python."""
    bounds = offsets.tolist()
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    if validity is not None:
        bits = bytes(validity)
        lengths = [length if bits[i >> 3] >> (i & 7) & 1 else -1
                   for i, length in enumerate(lengths)]
    return lengths
