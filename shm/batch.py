"""Record batch codec: Kafka v2 header, columnar (Arrow binary layout) body. Sans-I/O.

Layout (all little-endian; HEADER_BYTES = 61, exactly Kafka v2's header fields):

    offset  field                   type
    0       base_offset             i64   stamped by the leader in place
    8       batch_length            i32   bytes AFTER this field (total - 12), as Kafka
    12      partition_leader_epoch  i32   stamped by the leader in place
    16      magic                   i8    always 2
    17      crc                     u32   CRC-32C of bytes [21, end): attributes..end
    21      attributes              i16   see ATTR_* below
    23      last_offset_delta       i32   record_count - 1
    27      base_timestamp          i64   ms
    35      max_timestamp           i64   ms, = base_timestamp + max(timestamp_delta)
    43      producer_id             i64   -1 if none
    51      producer_epoch          i16   -1 if none
    53      base_sequence           i32   -1 if none
    57      record_count            i32   n, 1 <= n <= BATCH_RECORDS_MAX
    61      body

Body (Arrow binary layout, so a batch becomes pyarrow arrays without copying payloads):

    timestamp_delta i32[n] | key_offsets i32[n+1] | value_offsets i32[n+1] |
    key bytes | value bytes | [key validity bitmap] | [value validity bitmap] |
    [header_offsets i32[n+1] | header bytes]

Rules:
- Offsets arrays start at 0, never decrease, and end at the length of their bytes
  section; the body length is exactly the sum of its sections.
- Null keys/values: decided once, by flag + Arrow validity bitmap. If attribute bit
  ATTR_KEY_NULLS (0x100) is set, a key validity bitmap of ceil(n/8) bytes follows the
  value bytes (Arrow bit order: bit i of byte i//8, LSB first; 1 = present, 0 = null);
  likewise ATTR_VALUE_NULLS (0x200) for values, after the key bitmap. A null entry has
  zero length in its offsets array. Without the flag every entry is present (an empty
  key is b"", not null) and no bitmap is stored - the common case costs nothing.
- Record headers: if ATTR_HEADERS (0x400) is set, a headers column (offsets + bytes, one
  entry per record, each in Kafka's own header encoding: ``shm.record_headers``) ends
  the body. Readers that do not ask for headers never look at it; without the flag
  the batch is byte for byte what it was before headers existed.
- Kafka's low attribute bits: bits 0-2 (ATTR_CODEC_MASK) keep the compression codec the
  producer used, as a HINT only (the body in our log is never compressed; a Kafka fetch
  may compress with it again); 0x08 (ATTR_LOG_APPEND_TIME) is Kafka's timestamp type.
- Transactions (KIP-98), Kafka's bits and rules: ATTR_TRANSACTIONAL (0x10) marks a
  batch of a transaction: producer_id >= 0 and producer_epoch >= 0 are required, and a
  data batch's base_sequence >= 0. ATTR_CONTROL (0x20) marks a control batch: it must
  be transactional too (Kafka sets both), has base_sequence -1 and exactly one record,
  whose key/value are Kafka's control record (``shm.control``: COMMIT/ABORT markers;
  their content is checked there and by the log, not by this codec). Every other bit
  (0x40 Kafka's delete horizon, 0x80, 0x800 and up) makes the batch corrupt.
- The CRC starts at ``attributes``, so ``stamp()`` (base_offset, partition_leader_epoch)
  never changes it: brokers never re-encode a batch.
- Every decoding failure (truncated, oversized, corrupt) raises exactly one
  ``CorruptRecordError``; nothing else escapes the parser (checked by a fuzz test).
- The body arrays are not necessarily aligned (61-byte header, batches packed back to
  back); numpy and pyarrow read unaligned i32 buffers correctly.
"""
from __future__ import annotations

import itertools
import struct
import time
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from shm import record_headers
from shm.batch_format import (  # noqa: F401  (re-exported: shm.batch is the codec's name)
    MAGIC, HEADER, HEADER_BYTES, LENGTH_OVERHEAD_BYTES, CRC_START, BASE_OFFSET,
    LEADER_EPOCH, LEADER_EPOCH_POSITION, PREFIX, LAST_OFFSET_DELTA,
    LAST_OFFSET_DELTA_POSITION, CRC, CRC_POSITION, PRODUCER, PRODUCER_POSITION,
    ATTR_CODEC_MASK, CODEC_MAX, ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, ATTR_CONTROL,
    ATTR_KEY_NULLS, ATTR_VALUE_NULLS,
    ATTR_HEADERS, ATTR_KNOWN, NO_PRODUCER_ID, NO_PRODUCER_EPOCH, NO_SEQUENCE,
    CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD,
    CorruptRecordError, BatchHeader, RecordBatch, Columns, header_from, transaction_problem)
from shm.config import BATCH_BYTES_MAX, BATCH_RECORDS_MAX


# ---------------------------------------------------------------- building

def build_batch(values, keys=None, timestamps_ms=None, *, base_offset: int = 0,
                partition_leader_epoch: int = -1, producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE, headers=None, codec_hint: int = CODEC_NONE,
                log_append_time: bool = False, transactional: bool = False,
                control: bool = False, crc: bool = True) -> bytearray:
    """Encode one batch; returns a writable bytearray (so the leader can ``stamp`` it).

    ``values`` / ``keys``: a list of bytes-or-None, a pyarrow Binary/LargeBinary array,
    or a 2-D uint8 numpy array (one fixed-size record per row). ``keys=None`` means
    every key is null. ``timestamps_ms``: None (now), an int (all the same), or a
    sequence / numpy array of n ints. Arrays are encoded without per-record Python work.
    ``headers``: None, or per record a list of (key, value|None); the headers column is
    written only if some record has headers.
    ``codec_hint``: the CODEC_* a Kafka producer compressed with (a hint, see above).
    ``log_append_time``: Kafka's LogAppendTime; every timestamp must then be the same.
    ``transactional`` / ``control``: Kafka's bits, under the rules above (ValueError
    otherwise); a control batch is built by ``shm.control.build_marker``.
    ``crc=False`` leaves the CRC 0, for a caller that ``stamp_producer``s the batch
    before it leaves (the idempotent producer: the CRC covers what it stamps, and
    Kafka's producer too computes it once, when it closes the batch at drain).
    """
    value_col = _column(values, "values")
    n = value_col.count
    if not 1 <= n <= BATCH_RECORDS_MAX:
        raise ValueError(f"a batch holds 1..{BATCH_RECORDS_MAX} records, got {n}")
    key_col = _null_column(n) if keys is None else _column(keys, "keys")
    if key_col.count != n:
        raise ValueError(f"{key_col.count} keys for {n} values")
    if timestamps_ms is None or isinstance(timestamps_ms, (int, np.integer)):
        # One timestamp for every record (the usual case): no array to reduce.
        base_timestamp = int(time.time() * 1000) if timestamps_ms is None \
            else int(timestamps_ms)
        deltas = np.zeros(n, "<i4")
    else:
        timestamps = _timestamps(timestamps_ms, n)
        base_timestamp = int(timestamps.min())
        deltas = timestamps - base_timestamp
        if int(deltas.max()) > 2**31 - 1:
            raise ValueError("timestamps in one batch must span less than 2**31 ms")
        if log_append_time and int(deltas.max()):
            raise ValueError("a LogAppendTime batch has one timestamp for all its records")
    header_offsets = header_data = None
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"{len(headers)} header lists for {n} values")
        entries = record_headers.encode_entries(headers)
        if any(entries):  # no record with headers: no column, as for headers=None
            header_offsets = np.fromiter(itertools.accumulate(map(len, entries), initial=0),
                                         np.int64, n + 1)
            header_data = b"".join(entries)
    return encode_columns(
        deltas.astype("<i4", copy=False), key_col.offsets, key_col.data, value_col.offsets,
        value_col.data, key_validity=key_col.validity, value_validity=value_col.validity,
        header_offsets=header_offsets, header_data=header_data,
        base_timestamp=base_timestamp, base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence, codec_hint=codec_hint,
        log_append_time=log_append_time, transactional=transactional, control=control,
        crc=crc)


def encode_columns(timestamp_deltas, key_offsets, key_data, value_offsets, value_data, *,
                   key_validity=None, value_validity=None, header_offsets=None,
                   header_data=None, base_timestamp: int, base_offset: int = 0,
                   partition_leader_epoch: int = -1, producer_id: int = NO_PRODUCER_ID,
                   producer_epoch: int = NO_PRODUCER_EPOCH, base_sequence: int = NO_SEQUENCE,
                   codec_hint: int = CODEC_NONE, log_append_time: bool = False,
                   transactional: bool = False, control: bool = False,
                   crc: bool = True) -> bytearray:
    """Encode one batch from its columns, already laid out: the one body writer
    (``build_batch`` and the Kafka listener's converter use it). ``timestamp_deltas``:
    n non-negative ints; offsets: n + 1 ints from 0, ending at their data's length;
    validity: packed bitmaps (or None: nothing null); data: any bytes-like objects.
    The int columns may be numpy arrays or, for a few records, lists (then packed with
    struct: numpy's cost per call is most of a small batch's)."""
    n = len(timestamp_deltas)
    if not 1 <= n <= BATCH_RECORDS_MAX:
        raise ValueError(f"a batch holds 1..{BATCH_RECORDS_MAX} records, got {n}")
    if not CODEC_NONE <= codec_hint <= CODEC_MAX:
        raise ValueError(f"unknown compression codec {codec_hint}")
    if isinstance(timestamp_deltas, list):
        int32s = _packed_int32s
        max_delta, min_delta = max(timestamp_deltas), min(timestamp_deltas)
    else:
        int32s = _int32s
        max_delta, min_delta = int(np.max(timestamp_deltas)), int(np.min(timestamp_deltas))
    parts = [int32s(timestamp_deltas), int32s(key_offsets), int32s(value_offsets), key_data,
             value_data]
    attributes = codec_hint | (ATTR_LOG_APPEND_TIME if log_append_time else 0)
    if transactional or control:
        problem = transaction_problem(transactional, control, producer_id, producer_epoch,
                                       base_sequence, n)
        if problem:
            raise ValueError(problem)
        attributes |= ATTR_TRANSACTIONAL | (ATTR_CONTROL if control else 0)
    for bit, bitmap in ((ATTR_KEY_NULLS, key_validity), (ATTR_VALUE_NULLS, value_validity)):
        if bitmap is not None:
            attributes |= bit
            parts.append(bitmap)
    if header_offsets is not None:
        attributes |= ATTR_HEADERS
        parts += [int32s(header_offsets), header_data]
    views = [memoryview(p if isinstance(p, (bytes, bytearray, memoryview))
                        else np.ascontiguousarray(p)).cast("B") for p in parts]
    assert len(views[1]) == len(views[2]) == 4 * (n + 1), "offsets: n + 1 entries"
    body_bytes = sum(len(v) for v in views)
    total_bytes = HEADER_BYTES + body_bytes
    if total_bytes > BATCH_BYTES_MAX:
        raise ValueError(f"batch of {total_bytes} bytes exceeds {BATCH_BYTES_MAX}")
    buf = bytearray(total_bytes)
    position = HEADER_BYTES
    for view in views:
        buf[position:position + len(view)] = view
        position += len(view)
    assert position == total_bytes
    assert min_delta >= 0, "timestamp deltas are >= 0"
    _pack_header(buf, base_offset, partition_leader_epoch, attributes, n, base_timestamp,
                 base_timestamp + max_delta, producer_id, producer_epoch, base_sequence, crc)
    return buf


def _int32s(values) -> np.ndarray:
    return np.asarray(values, "<i4")


def _packed_int32s(values: list) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


def _pack_header(buf: bytearray, base_offset: int, partition_leader_epoch: int,
                 attributes: int, n: int, base_timestamp: int, max_timestamp: int,
                 producer_id: int, producer_epoch: int, base_sequence: int,
                 crc: bool = True) -> None:
    """Write the header of the one batch filling ``buf`` (its body already in place),
    then its CRC (unless ``crc`` is False: left 0, see ``build_batch``): the one header
    packing of both encoders."""
    HEADER.pack_into(buf, 0, base_offset, len(buf) - LENGTH_OVERHEAD_BYTES,
                     partition_leader_epoch, MAGIC, 0, attributes, n - 1, base_timestamp,
                     max_timestamp, producer_id, producer_epoch, base_sequence, n)
    if crc:
        CRC.pack_into(buf, CRC_POSITION, crc32c(memoryview(buf)[CRC_START:]))


# Up to this many records, ``encode_small_batch`` packs with struct: numpy's and
# pyarrow's fixed cost dominates a one-record batch (~50 us vs ~8 us). Not to be mixed
# up with SMALL_BATCH_RECORDS, the struct path of ``check_batch``.
SMALL_ENCODE_RECORDS_MAX = 256


def encode_small_batch(values: list, keys: list | None, timestamps,
                       headers: list | None = None, *, crc: bool = True) -> bytearray | None:
    """``build_batch``'s fast path for a few records, byte for byte the same batch,
    without numpy or pyarrow (the producer's path for what ``send`` buffers). ``values``
    and ``keys``: lists of bytes; ``timestamps``: an int or a list of n ints;
    ``headers``: None or per record its headers (as ``build_batch``'s); ``crc`` as
    ``build_batch``'s. Returns None when the input needs the general encoder (null
    values, mixed null keys, too many records, a too wide time span or size): then call
    ``build_batch``."""
    n = len(values)
    if not 1 <= n <= SMALL_ENCODE_RECORDS_MAX or None in values:
        return None
    if isinstance(timestamps, int):
        base_timestamp = max_timestamp = timestamps
        deltas = bytes(4 * n)
    else:
        base_timestamp, max_timestamp = min(timestamps), max(timestamps)
        if max_timestamp - base_timestamp > 2**31 - 1:
            return None
        deltas = struct.pack(f"<{n}i", *[t - base_timestamp for t in timestamps])
    attributes = 0
    if keys is None:
        key_offsets, key_data, key_bitmap = bytes(4 * (n + 1)), b"", bytes((n + 7) // 8)
        attributes |= ATTR_KEY_NULLS
    else:
        if None in keys:
            return None
        key_offsets = struct.pack(f"<{n + 1}i", *itertools.accumulate(map(len, keys),
                                                                        initial=0))
        key_data, key_bitmap = b"".join(keys), b""
    value_offsets = struct.pack(f"<{n + 1}i", *itertools.accumulate(map(len, values),
                                                                      initial=0))
    parts = [deltas, key_offsets, value_offsets, key_data, *values, key_bitmap]
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"{len(headers)} header lists for {n} values")
        entries = record_headers.encode_entries(headers)
        if any(entries):  # as build_batch: a column only if some record has headers
            attributes |= ATTR_HEADERS
            parts.append(struct.pack(f"<{n + 1}i", *itertools.accumulate(map(len, entries),
                                                                           initial=0)))
            parts += entries
    body = b"".join(parts)
    total = HEADER_BYTES + len(body)
    if total > BATCH_BYTES_MAX:
        return None
    buf = bytearray(total)
    buf[HEADER_BYTES:] = body
    _pack_header(buf, 0, -1, attributes, n, base_timestamp, max_timestamp, NO_PRODUCER_ID,
                 NO_PRODUCER_EPOCH, NO_SEQUENCE, crc)
    return buf


@dataclass
class _Column:
    count: int
    offsets: np.ndarray  # "<i4", count + 1, starting at 0
    data: np.ndarray  # uint8
    validity: np.ndarray | None  # packed uint8 bitmap, or None when nothing is null


def _null_column(n: int) -> _Column:
    return _Column(n, np.zeros(n + 1, "<i4"), np.zeros(0, np.uint8),
                   np.zeros((n + 7) // 8, np.uint8))


def _column(items, what: str) -> _Column:
    if isinstance(items, np.ndarray):
        if items.ndim != 2 or items.dtype != np.uint8:
            raise ValueError(f"{what}: a numpy column must be 2-D uint8 (one row per record)")
        n, width = items.shape
        offsets = (np.arange(n + 1, dtype=np.int64) * width)
        if offsets[-1] > BATCH_BYTES_MAX:
            raise ValueError(f"{what}: {offsets[-1]} bytes exceed {BATCH_BYTES_MAX}")
        return _Column(n, offsets.astype("<i4"), items.reshape(-1), None)
    if isinstance(items, pa.ChunkedArray):
        items = items.combine_chunks()
    if not isinstance(items, pa.Array):
        items = pa.array(list(items), type=pa.binary())  # one C pass over the list
    if pa.types.is_large_binary(items.type) or pa.types.is_string(items.type) \
            or pa.types.is_large_string(items.type):
        items = items.cast(pa.binary())
    if not pa.types.is_binary(items.type):
        raise ValueError(f"{what}: expected binary values, got {items.type}")
    return _arrow_column(items)


def _arrow_column(array: pa.Array) -> _Column:
    n = len(array)
    validity = None
    if array.null_count:
        # Our rule: a null slot has zero length. Foreign arrays may not follow it, so
        # keep only the present values (one C pass) and re-spread their lengths.
        valid = array.is_valid().to_numpy(zero_copy_only=False)
        present = _arrow_column(array.filter(array.is_valid()))
        lengths = np.zeros(n, np.int64)
        lengths[valid] = np.diff(present.offsets)
        offsets = np.concatenate(([0], np.cumsum(lengths))).astype("<i4")
        return _Column(n, offsets, present.data, np.packbits(valid, bitorder="little"))
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype="<i4")[array.offset:array.offset + n + 1]
    start, end = int(offsets[0]), int(offsets[-1])
    data = np.frombuffer(data_buf, dtype=np.uint8)[start:end] if data_buf is not None \
        else np.zeros(0, np.uint8)
    return _Column(n, (offsets - start).astype("<i4"), data, validity)


def _timestamps(timestamps_ms, n: int) -> np.ndarray:
    """A timestamp per record (``build_batch`` handles one for all itself)."""
    array = np.asarray(timestamps_ms, dtype=np.int64)
    if array.shape != (n,):
        raise ValueError(f"{array.shape} timestamps for {n} records")
    return array


# ---------------------------------------------------------------- stamping

def stamp(buf, base_offset: int, partition_leader_epoch: int) -> None:
    """Set base_offset and partition_leader_epoch in place (the CRC does not cover them)."""
    BASE_OFFSET.pack_into(buf, 0, base_offset)
    LEADER_EPOCH.pack_into(buf, LEADER_EPOCH_POSITION, partition_leader_epoch)


def stamp_producer(buf, producer_id: int, producer_epoch: int, base_sequence: int, *,
                   transactional: bool = False) -> None:
    """Set an idempotent producer's id, epoch and base sequence in place (one batch in
    ``buf``, writable) and the CRC, which covers them; ``transactional`` also sets
    ATTR_TRANSACTIONAL (a transactional producer's data batch: the rules above)."""
    PRODUCER.pack_into(buf, PRODUCER_POSITION, producer_id, producer_epoch, base_sequence)
    if transactional:
        if producer_id < 0 or producer_epoch < 0 or base_sequence < 0:
            raise ValueError("a transactional batch needs producer id, epoch and sequence >= 0")
        attributes = struct.unpack_from("<h", buf, CRC_START)[0]
        struct.pack_into("<h", buf, CRC_START, attributes | ATTR_TRANSACTIONAL)
    CRC.pack_into(buf, CRC_POSITION, crc32c(memoryview(buf)[CRC_START:]))


# ---------------------------------------------------------------- parsing

def read_header(buf, position: int = 0, *,
                max_bytes: int = BATCH_BYTES_MAX) -> BatchHeader:
    """Decode and check the fixed header at ``position`` (no CRC, no body checks).

    Checks that the whole batch fits in ``buf`` and in ``max_bytes``.
    """
    available = len(buf) - position
    if available < HEADER_BYTES:
        raise CorruptRecordError(
            f"truncated batch at position {position}: {available} bytes, "
            f"a header needs {HEADER_BYTES}", position)
    header = header_from(HEADER.unpack_from(buf, position))
    size = header.size_bytes
    if header.batch_length < HEADER_BYTES - LENGTH_OVERHEAD_BYTES:
        raise CorruptRecordError(
            f"batch at position {position} has batch_length {header.batch_length}, "
            f"below the header's {HEADER_BYTES - LENGTH_OVERHEAD_BYTES}", position)
    if size > max_bytes:
        raise CorruptRecordError(
            f"batch at position {position} is {size} bytes, over the limit of "
            f"{max_bytes} (message.max.bytes)", position)
    if size > available:
        raise CorruptRecordError(
            f"truncated batch at position {position}: needs {size} bytes, "
            f"{available} present", position)
    if header.magic != MAGIC:
        raise CorruptRecordError(
            f"batch at position {position} has magic {header.magic}, expected {MAGIC}",
            position)
    if header.attributes & ~ATTR_KNOWN or header.attributes & ATTR_CODEC_MASK > CODEC_MAX:
        raise CorruptRecordError(
            f"batch at position {position} has unsupported attributes "
            f"{header.attributes:#x}", position)
    if not 1 <= header.record_count <= BATCH_RECORDS_MAX:
        raise CorruptRecordError(
            f"batch at position {position} has record_count {header.record_count}",
            position)
    if header.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL):
        problem = transaction_problem(
            bool(header.attributes & ATTR_TRANSACTIONAL), bool(header.attributes & ATTR_CONTROL),
            header.producer_id, header.producer_epoch, header.base_sequence,
            header.record_count)
        if problem:
            raise CorruptRecordError(f"batch at position {position}: {problem}", position)
    if header.last_offset_delta != header.record_count - 1:
        raise CorruptRecordError(
            f"batch at position {position} has last_offset_delta "
            f"{header.last_offset_delta} for {header.record_count} records", position)
    if header.base_offset < 0:
        raise CorruptRecordError(
            f"batch at position {position} has negative base_offset "
            f"{header.base_offset}", position)
    return header


def crc_of(buf, position: int, header: BatchHeader) -> int:
    return crc32c(memoryview(buf)[position + CRC_START:position + header.size_bytes])


def _fixed_bytes(header: BatchHeader) -> int:
    """Bytes of a batch's sections whose size follows from its record count alone."""
    n = header.record_count
    bitmaps = bool(header.attributes & ATTR_KEY_NULLS) + bool(header.attributes & ATTR_VALUE_NULLS)
    headers = 4 * (n + 1) if header.attributes & ATTR_HEADERS else 0
    return HEADER_BYTES + 4 * n + 8 * (n + 1) + bitmaps * ((n + 7) // 8) + headers


def _checked_fixed_bytes(position: int, header: BatchHeader) -> int:
    """``_fixed_bytes``, refused if the batch is smaller."""
    fixed = _fixed_bytes(header)
    if fixed > header.size_bytes:
        raise CorruptRecordError(
            f"batch at position {position}: {header.record_count} records need at least "
            f"{fixed} bytes, batch has {header.size_bytes}", position)
    return fixed


def _check_sizes(position: int, header: BatchHeader, fixed: int, key_bytes: int,
                 value_bytes: int, header_bytes: int) -> None:
    if key_bytes < 0 or value_bytes < 0 or header_bytes < 0 or \
            fixed + key_bytes + value_bytes + header_bytes != header.size_bytes:
        raise CorruptRecordError(
            f"batch at position {position}: key/value/header sections ({key_bytes}, "
            f"{value_bytes}, {header_bytes} bytes) do not add up to batch size "
            f"{header.size_bytes}", position)


def _header_bytes_at(buf, position: int, header: BatchHeader, fixed: int, key_bytes: int,
                     value_bytes: int) -> int:
    """The headers column's byte count (its offsets' last entry), 0 without the column;
    read only once the key/value sections are known to fit."""
    if not header.attributes & ATTR_HEADERS:
        return 0
    if key_bytes < 0 or value_bytes < 0 or fixed + key_bytes + value_bytes > header.size_bytes:
        return -1  # _check_sizes refuses it
    last = position + fixed + key_bytes + value_bytes - 4  # the offsets end the fixed part
    return struct.unpack_from("<i", buf, last)[0]


def _check_header_entries(buf, position: int, header: BatchHeader, offsets_at: int,
                          offsets) -> None:
    """The headers column: offsets from 0, never decreasing; each entry well formed."""
    n = header.record_count
    bounds = list(offsets)
    if bounds[0] != 0 or any(b < a for a, b in zip(bounds, bounds[1:])):
        raise CorruptRecordError(
            f"batch at position {position}: header offsets are not monotonic from 0",
            position)
    data_at = position + offsets_at + 4 * (n + 1)
    view = memoryview(buf)[data_at:data_at + bounds[-1]]
    try:
        record_headers.check_entries(view, bounds)
    except record_headers.HeaderFormatError as e:
        raise CorruptRecordError(f"batch at position {position}: record headers: {e}",
                                 position) from None


def _layout(buf, position: int, header: BatchHeader, *, check: bool = True) -> Columns:
    """Check the body's structure (unless ``_check_small_layout`` did); returns its
    sections as views."""
    n = header.record_count
    view = memoryview(buf)[position:position + header.size_bytes]
    bitmap_bytes = (n + 7) // 8
    fixed = _checked_fixed_bytes(position, header)
    p = HEADER_BYTES
    deltas = np.frombuffer(view, dtype="<i4", count=n, offset=p)
    p += 4 * n
    key_offsets = np.frombuffer(view, dtype="<i4", count=n + 1, offset=p)
    p += 4 * (n + 1)
    value_offsets = np.frombuffer(view, dtype="<i4", count=n + 1, offset=p)
    p += 4 * (n + 1)
    key_bytes, value_bytes = int(key_offsets[-1]), int(value_offsets[-1])
    header_bytes = _header_bytes_at(view, 0, header, fixed, key_bytes, value_bytes)
    _check_sizes(position, header, fixed, key_bytes, value_bytes, header_bytes)
    if check:
        _check_columns(buf, position, header, fixed)
    key_data = view[p:p + key_bytes]
    p += key_bytes
    value_data = view[p:p + value_bytes]
    p += value_bytes
    key_validity = value_validity = header_offsets = header_data = None
    if header.attributes & ATTR_KEY_NULLS:
        key_validity = view[p:p + bitmap_bytes]
        p += bitmap_bytes
    if header.attributes & ATTR_VALUE_NULLS:
        value_validity = view[p:p + bitmap_bytes]
        p += bitmap_bytes
    if header.attributes & ATTR_HEADERS:
        header_offsets = np.frombuffer(view, dtype="<i4", count=n + 1, offset=p)
        p += 4 * (n + 1)
        header_data = view[p:p + header_bytes]
        p += header_bytes
    assert p == header.size_bytes
    return Columns(header, deltas, key_offsets, key_data, value_offsets, value_data,
                   key_validity, value_validity, header_offsets, header_data)


_INT32 = struct.Struct("<i")


def _check_layout(buf, position: int, header: BatchHeader) -> None:
    """``_layout``'s checks without building its views (check_batch: a leader's append)."""
    n = header.record_count
    fixed = _checked_fixed_bytes(position, header)
    at = position + HEADER_BYTES + 4 * n                 # the key offsets, then the values'
    key_bytes = _INT32.unpack_from(buf, at + 4 * n)[0]
    value_bytes = _INT32.unpack_from(buf, at + 8 * n + 4)[0]
    header_bytes = _header_bytes_at(buf, position, header, fixed, key_bytes, value_bytes)
    _check_sizes(position, header, fixed, key_bytes, value_bytes, header_bytes)
    _check_columns(buf, position, header, fixed)


def _check_columns(buf, position: int, header: BatchHeader, fixed: int) -> None:
    """Key and value offsets never decreasing from 0, timestamp deltas matching the
    header, the headers column well formed: once the sections are known to fit. The
    deltas and both offset columns are adjacent: one array, a few numpy calls."""
    n = header.record_count
    columns = np.frombuffer(buf, dtype="<i4", count=3 * n + 2, offset=position + HEADER_BYTES)
    offsets = columns[n:].reshape(2, n + 1)
    if offsets[0, 0] != 0 or offsets[1, 0] != 0 or \
            (n and bool((offsets[:, 1:] < offsets[:, :-1]).any())):
        name = "key" if offsets[0, 0] != 0 or \
            (n and bool((offsets[0, 1:] < offsets[0, :-1]).any())) else "value"
        raise CorruptRecordError(
            f"batch at position {position}: {name} offsets are not monotonic from 0",
            position)
    if n:
        deltas = columns[:n]
        if int(np.minimum.reduce(deltas)) < 0 or \
                header.base_timestamp + int(np.maximum.reduce(deltas)) != header.max_timestamp:
            raise CorruptRecordError(
                f"batch at position {position}: timestamp deltas do not match "
                f"max_timestamp {header.max_timestamp}", position)
    if header.attributes & ATTR_HEADERS:
        offsets_at = fixed - 4 * (n + 1) + int(offsets[0, n]) + int(offsets[1, n])
        _check_header_entries(buf, position, header, offsets_at,
                              struct.unpack_from(f"<{n + 1}i", buf, position + offsets_at))


# Up to this many records, check_batch checks the layout with struct instead of numpy
# (numpy's per-call cost dominates for the single-record batches of a latency path).
SMALL_BATCH_RECORDS = 8
# Timestamp deltas, key offsets and value offsets of a small batch: one Struct per count.
_SMALL_LAYOUTS = [struct.Struct(f"<{n}i{n + 1}i{n + 1}i")
                  for n in range(SMALL_BATCH_RECORDS + 1)]


def _check_small_layout(buf, position: int, header: BatchHeader) -> None:
    """``_layout``'s checks for a batch of at most SMALL_BATCH_RECORDS records."""
    n = header.record_count
    fixed = _checked_fixed_bytes(position, header)
    numbers = _SMALL_LAYOUTS[n].unpack_from(buf, position + HEADER_BYTES)
    deltas, key_offsets, value_offsets = \
        numbers[:n], numbers[n:2 * n + 1], numbers[2 * n + 1:]
    key_bytes, value_bytes = key_offsets[-1], value_offsets[-1]
    header_bytes = _header_bytes_at(buf, position, header, fixed, key_bytes, value_bytes)
    _check_sizes(position, header, fixed, key_bytes, value_bytes, header_bytes)
    for name, offs in (("key", key_offsets), ("value", value_offsets)):
        # Never decreasing: sorting changes nothing (one C call, not a generator).
        if offs[0] != 0 or tuple(sorted(offs)) != offs:
            raise CorruptRecordError(
                f"batch at position {position}: {name} offsets are not monotonic from 0",
                position)
    if n and (min(deltas) < 0 or header.base_timestamp + max(deltas) != header.max_timestamp):
        raise CorruptRecordError(
            f"batch at position {position}: timestamp deltas do not match "
            f"max_timestamp {header.max_timestamp}", position)
    if header.attributes & ATTR_HEADERS:
        offsets_at = fixed - 4 * (n + 1) + key_bytes + value_bytes
        _check_header_entries(buf, position, header, offsets_at,
                              struct.unpack_from(f"<{n + 1}i", buf, position + offsets_at))


def check_batch(buf, position: int = 0, *, max_bytes: int = BATCH_BYTES_MAX,
                verify_crc: bool = True, structure: bool = True) -> BatchHeader:
    """Full validation of the batch at ``position`` without building arrays; with
    ``structure=False`` the header and the CRC only (a follower's check, as Kafka's
    ``appendAsFollower``: the leader checked the body's structure, and the CRC says the
    body is what it checked)."""
    header = read_header(buf, position, max_bytes=max_bytes)
    if verify_crc:
        _verify_crc(buf, position, header)
    if structure:
        if header.record_count <= SMALL_BATCH_RECORDS:
            _check_small_layout(buf, position, header)
        else:
            _check_layout(buf, position, header)
    return header


def _verify_crc(buf, position: int, header: BatchHeader) -> None:
    actual = crc_of(buf, position, header)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at position {position} (base offset {header.base_offset}) fails "
            f"its CRC: stored {header.crc:#010x}, computed {actual:#010x}", position)


def read_columns(buf, position: int = 0, *, max_bytes: int = BATCH_BYTES_MAX,
                 verify_crc: bool = True) -> Columns:
    """Check the batch at ``position`` and return its sections as views (no copies)."""
    header = read_header(buf, position, max_bytes=max_bytes)
    if verify_crc:
        _verify_crc(buf, position, header)
    if header.record_count <= SMALL_BATCH_RECORDS:
        _check_small_layout(buf, position, header)
        return _layout(buf, position, header, check=False)
    return _layout(buf, position, header)


def parse_batch(buf, position: int = 0, *, max_bytes: int = BATCH_BYTES_MAX,
                verify_crc: bool = True) -> RecordBatch:
    """Parse the batch at ``position``; bytes after it are ignored. Zero-copy views."""
    c = read_columns(buf, position, max_bytes=max_bytes, verify_crc=verify_crc)
    n = c.header.record_count
    keys = _arrow(n, c.key_validity, c.key_offsets, c.key_data)
    values = _arrow(n, c.value_validity, c.value_offsets, c.value_data)
    headers = None if c.header_offsets is None else \
        _arrow(n, None, c.header_offsets, c.header_data)
    return RecordBatch(c.header, c.timestamp_deltas, keys, values, headers)


def _arrow(n, validity, offsets: np.ndarray, data) -> pa.Array:
    validity_buf = None if validity is None else pa.py_buffer(validity)
    return pa.Array.from_buffers(pa.binary(), n,
                                 [validity_buf, pa.py_buffer(offsets), pa.py_buffer(data)])


def iter_batches(buf, *, max_bytes: int = BATCH_BYTES_MAX,
                 verify_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Walk concatenated batches: yields (position, header) for each, checked fully.

    The region must hold whole batches only; anything else raises CorruptRecordError
    with the position of the first bad batch.
    """
    position = 0
    end = len(buf)
    while position < end:
        header = check_batch(buf, position, max_bytes=max_bytes, verify_crc=verify_crc)
        yield position, header
        position += header.size_bytes


def parse_batches(buf, *, max_bytes: int = BATCH_BYTES_MAX) -> list[RecordBatch]:
    return [parse_batch(buf, position, max_bytes=max_bytes)
            for position, _ in iter_batches(buf, max_bytes=max_bytes, verify_crc=False)]


