"""Kafka v2 records <-> columns, many records at a time with numpy. Sans-I/O, pure.

The per-record work of ``node.kafka.records``: a Kafka record is

    length varint | attributes i8 | timestamp_delta varlong | offset_delta varint |
    key_length varint | key | value_length varint | value | headers (shm.record_headers)

(varints zigzag, a length of -1 is null). Python loops only where the format is
sequential (finding where each record starts: its length prefix); every other field is
decoded and encoded for all records at once with numpy. Errors raise ValueError with a
message; the caller gives them a Kafka error code.

``RecordColumns`` is the meeting point of both directions: absolute timestamps, key and
value lengths (-1 = null) with their bytes back to back, and the headers entries (Kafka's
own encoding, copied byte for byte; None when no record has headers).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shm import record_headers
from shm.record_headers import HeaderFormatError, VARINT_BYTES_MAX, VARLONG_BYTES_MAX

# The smallest record body (after its length): attributes, and one byte each for the
# timestamp delta, offset delta, key length, value length and header count.
RECORD_BODY_MIN_BYTES = 6
PAD_BYTES = 16  # zero bytes after the records: a varint read past a record stays in bounds
INT32_MAX = 2**31 - 1


@dataclass
class RecordColumns:
    timestamps: np.ndarray  # int64[n], absolute ms
    key_lengths: np.ndarray  # int64[n], -1 = null key
    key_data: bytes
    value_lengths: np.ndarray  # int64[n], -1 = null value
    value_data: bytes
    header_lengths: np.ndarray | None  # int64[n] (0 = no headers), None: no record has any
    header_data: bytes | None

    @property
    def count(self) -> int:
        return len(self.timestamps)


# ---------------------------------------------------------------- decoding

def _record_bounds(raw: bytes, n: int) -> tuple[list[int], list[int]]:
    """(start of each record's body, its length): the one sequential walk, tight."""
    starts: list[int] = []
    lengths: list[int] = []
    add_start, add_length = starts.append, lengths.append
    p = 0
    try:
        for _ in range(n):
            b = raw[p]
            if b < 0x80:
                z = b
                p += 1
            else:
                c = raw[p + 1]
                if c < 0x80:
                    z = (b & 0x7F) | (c << 7)
                    p += 2
                else:
                    z, p = _long_length(raw, p)
            length = (z >> 1) ^ -(z & 1)
            if length < RECORD_BODY_MIN_BYTES:
                raise ValueError(f"a record of {length} bytes")
            add_start(p)
            add_length(length)
            p += length
    except IndexError:
        raise ValueError(f"the records end before record {len(starts)} of {n}") from None
    if p != len(raw):
        raise ValueError(f"{n} records end at byte {p} of {len(raw)}" if p < len(raw)
                         else f"record {n - 1} runs past the end of the batch")
    return starts, lengths


def _long_length(raw: bytes, p: int) -> tuple[int, int]:
    try:
        value, p = record_headers.read_varint(raw, p, len(raw))
    except HeaderFormatError as e:
        raise ValueError(f"record length: {e}") from None
    return ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF, p  # back to zigzag form


def _varints(arr: np.ndarray, pos: np.ndarray, max_bytes: int, what: str):
    """Decode one zigzag varint per record at ``pos``: (values int64, positions after)."""
    b = arr[pos]
    raw = (b & 0x7F).astype(np.uint64)
    pos = pos + 1
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift >= 7 * max_bytes:
            raise ValueError(f"{what}: a varint longer than {max_bytes} bytes")
        at = pos[more]
        b = arr[at]
        raw[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        pos[more] = at + 1
        more = more[(b & 0x80) != 0]
        shift += 7
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, pos


def _gather(raw: bytes, starts: np.ndarray, lengths: np.ndarray) -> bytes:
    """The byte ranges ``[starts[i], starts[i] + lengths[i])`` of ``raw``, back to back."""
    if not int(lengths.sum()):
        return b""
    return b"".join([raw[a:a + b] for a, b in zip(starts.tolist(), lengths.tolist())])


def decode(raw: bytes, n: int, first_timestamp: int) -> RecordColumns:
    """The ``n`` records that exactly fill ``raw`` (uncompressed), as columns. Offset
    deltas must be 0..n-1 in order (our log numbers records by position)."""
    if n > len(raw) // (RECORD_BODY_MIN_BYTES + 1):
        raise ValueError(f"{n} records cannot fit in {len(raw)} bytes")
    start_list, length_list = _record_bounds(raw, n)
    arr = np.frombuffer(raw + bytes(PAD_BYTES), np.uint8)
    starts = np.array(start_list, np.int64)
    ends = starts + np.array(length_list, np.int64)

    def inside(pos, what):
        if bool((pos > ends).any()):
            raise ValueError(f"{what} runs past the end of its record")

    pos = starts + 1  # attributes: unused in v2, as Kafka
    deltas, pos = _varints(arr, pos, VARLONG_BYTES_MAX, "timestamp delta")
    inside(pos, "a timestamp delta")
    offsets, pos = _varints(arr, pos, VARINT_BYTES_MAX, "offset delta")
    inside(pos, "an offset delta")
    if not np.array_equal(offsets, np.arange(n)):
        bad = int(np.flatnonzero(offsets != np.arange(n))[0])
        raise OffsetDeltaError(f"record {bad} has offset delta {int(offsets[bad])}")
    key_lengths, pos = _varints(arr, pos, VARINT_BYTES_MAX, "key length")
    key_starts = pos
    pos = pos + np.maximum(key_lengths, 0)
    inside(pos, "a key")
    value_lengths, pos = _varints(arr, pos, VARINT_BYTES_MAX, "value length")
    value_starts = pos
    pos = pos + np.maximum(value_lengths, 0)
    inside(pos, "a value")
    if int(key_lengths.min()) < -1 or int(value_lengths.min()) < -1:
        raise ValueError("a key or value length below -1")
    header_starts = pos
    counts, pos = _varints(arr, pos, VARINT_BYTES_MAX, "header count")
    inside(pos, "a header count")
    with_headers = np.flatnonzero(counts)
    header_lengths = header_data = None
    if with_headers.size:
        pos[with_headers] = [_entry_end(raw, int(header_starts[i]), int(ends[i]))
                             for i in with_headers.tolist()]
        header_lengths = np.where(counts != 0, ends - header_starts, 0)
        header_data = _gather(raw, header_starts, header_lengths)
    if not np.array_equal(pos, ends):
        bad = int(np.flatnonzero(pos != ends)[0])
        raise ValueError(f"record {bad}: {int(ends[bad] - pos[bad])} bytes left after its "
                         f"fields")
    timestamps = deltas + first_timestamp
    return RecordColumns(timestamps, key_lengths, _gather(raw, key_starts, key_lengths),
                         value_lengths, _gather(raw, value_starts, value_lengths),
                         header_lengths, header_data)


class OffsetDeltaError(ValueError):
    """Offset deltas that are not 0..n-1 in order."""


def _entry_end(raw: bytes, start: int, end: int) -> int:
    try:
        return record_headers.entry_end(raw, start, end)
    except HeaderFormatError as e:
        raise ValueError(f"record headers: {e}") from None


# ---------------------------------------------------------------- encoding

def _varint_bytes(values: np.ndarray):
    """Zigzag varints of ``values`` (int64[n]): (uint8 matrix [n, width], lengths)."""
    z = (values << 1) ^ (values >> 63)
    z = z.view(np.uint64)
    groups = [z & np.uint64(0x7F)]
    lengths = np.ones(len(values), np.int64)
    z = z >> np.uint64(7)
    while bool(z.any()):
        lengths += z != 0
        groups.append(z & np.uint64(0x7F))
        z = z >> np.uint64(7)
    matrix = np.stack(groups, axis=1).astype(np.uint8)
    if matrix.shape[1] > 1:  # continuation bit on every byte but a varint's last
        matrix[:, :-1] |= (np.arange(matrix.shape[1] - 1) < (lengths - 1)[:, None]) * np.uint8(0x80)
    return matrix, lengths


def _ragged(matrices_and_lengths) -> tuple[np.ndarray, np.ndarray]:
    """Row-wise concatenation of several varint matrices, each row keeping only its
    first ``length`` bytes: (bytes of all rows back to back, bytes per row)."""
    matrix = np.concatenate([m for m, _ in matrices_and_lengths], axis=1)
    mask = np.concatenate([np.arange(m.shape[1]) < lengths[:, None]
                           for m, lengths in matrices_and_lengths], axis=1)
    return matrix[mask], sum(lengths for _, lengths in matrices_and_lengths)


def encode(columns: RecordColumns, timestamp_base: int) -> np.ndarray:
    """Kafka v2 records for ``columns`` (offset deltas 0..n-1, timestamps relative to
    ``timestamp_base``): uint8 array of the records back to back."""
    n = columns.count
    key_bytes = np.maximum(columns.key_lengths, 0)
    value_bytes = np.maximum(columns.value_lengths, 0)
    if columns.header_lengths is None:
        tail_bytes = np.ones(n, np.int64)
        header_lengths = np.zeros(n, np.int64)
    else:
        header_lengths = columns.header_lengths
        tail_bytes = np.maximum(header_lengths, 1)  # no headers: one 0x00 (count 0)
    fields = [_varint_bytes(columns.timestamps - timestamp_base),
              _varint_bytes(np.arange(n, dtype=np.int64)),
              _varint_bytes(columns.key_lengths)]
    value_length = _varint_bytes(columns.value_lengths)
    body = 1 + sum(lengths for _, lengths in fields) + key_bytes + value_length[1] + \
        value_bytes + tail_bytes
    attributes = (np.zeros((n, 1), np.uint8), np.ones(n, np.int64))
    prefix, prefix_bytes = _ragged([_varint_bytes(body), attributes] + fields)
    middle, middle_bytes = _ragged([value_length])
    key_data = np.frombuffer(columns.key_data, np.uint8)
    value_data = np.frombuffer(columns.value_data, np.uint8)
    header_data = np.frombuffer(columns.header_data or b"", np.uint8)
    sources = [prefix, key_data, middle, value_data, header_data, np.zeros(1, np.uint8)]
    source = np.concatenate(sources)
    bases = np.cumsum([0] + [len(s) for s in sources[:-1]])

    def starts(lengths):
        return np.cumsum(lengths) - lengths

    zero_at = bases[5]
    tail_starts = np.where(header_lengths > 0, bases[4] + starts(header_lengths), zero_at)
    segment_starts = np.stack([bases[0] + starts(prefix_bytes), bases[1] + starts(key_bytes),
                               bases[2] + starts(middle_bytes), bases[3] + starts(value_bytes),
                               tail_starts], axis=1).ravel()
    segment_lengths = np.stack([prefix_bytes, key_bytes, middle_bytes, value_bytes,
                                tail_bytes], axis=1).ravel()
    return source[_segment_index(segment_starts, segment_lengths)]


def _segment_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Indexes into a source for the segments ``(starts[i], lengths[i])`` back to back:
    one cumulative sum (each index is the previous plus one, but at a segment's start)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    total = int(lengths.sum())
    steps = np.ones(total, np.int64)
    firsts = np.cumsum(lengths) - lengths
    steps[0] = starts[0]
    steps[firsts[1:]] = starts[1:] - (starts[:-1] + lengths[:-1]) + 1
    return np.cumsum(steps)


def encode_scalar(columns: RecordColumns, timestamp_base: int) -> bytes:
    """``encode`` record by record in Python: for a few records, where numpy's fixed
    cost per call is the larger part (and a cross-check of ``encode`` in the tests)."""
    out = bytearray()
    body = bytearray()
    key_at = value_at = header_at = 0
    write = record_headers.write_varint
    for i in range(columns.count):
        body.clear()
        body.append(0)
        write(int(columns.timestamps[i]) - timestamp_base, body)
        write(i, body)
        for lengths, data, at in ((columns.key_lengths, columns.key_data, key_at),
                                  (columns.value_lengths, columns.value_data, value_at)):
            length = int(lengths[i])
            write(length, body)
            if length > 0:
                body += data[at:at + length]
        key_at += max(int(columns.key_lengths[i]), 0)
        value_at += max(int(columns.value_lengths[i]), 0)
        length = 0 if columns.header_lengths is None else int(columns.header_lengths[i])
        if length:
            body += columns.header_data[header_at:header_at + length]
            header_at += length
        else:
            body.append(0)
        write(len(body), out)
        out += body
    return bytes(out)
