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
    """The int columns are numpy int64 arrays, or lists (the scalar paths, few records)."""

    timestamps: np.ndarray | list  # [n], absolute ms
    key_lengths: np.ndarray | list  # [n], -1 = null key
    key_data: bytes
    value_lengths: np.ndarray | list  # [n], -1 = null value
    value_data: bytes
    header_lengths: np.ndarray | list | None  # [n] (0 = no headers); None: no headers at all
    header_data: bytes | None

    @property
    def count(self) -> int:
        return len(self.timestamps)


# ---------------------------------------------------------------- decoding

def _step_table() -> list:
    """For the two bytes at a record's start (first | second << 8): how far the next
    record starts (its length varint's bytes + the length), when the varint takes one
    or two bytes (records under 8 KiB); None when it takes more."""
    first = np.arange(1 << 16) & 0xFF
    second = np.arange(1 << 16) >> 8
    one = (first >> 1) ^ -(first & 1)
    z = (first & 0x7F) | (second << 7)
    two = (z >> 1) ^ -(z & 1)
    steps = np.where(first < 0x80, 1 + one, 2 + two).tolist()
    for index in np.flatnonzero((first >= 0x80) & (second >= 0x80)).tolist():
        steps[index] = None
    return steps


_STEPS = _step_table()


def _record_starts(raw: bytes, n: int) -> list[int]:
    """Where each of the ``n`` records starts (at its length varint): the one sequential
    walk of the format, one table look-up a record. ``raw`` ends with a pad byte. The
    caller checks the result (a negative or short length is caught there)."""
    starts = [0] * n
    p = 0
    steps = _STEPS
    try:
        for i in range(n):
            starts[i] = p
            p += steps[raw[p] | (raw[p + 1] << 8)]
    except TypeError:  # a record of 8 KiB or more: a longer varint
        return _record_starts_long(raw, n, starts, i)
    except IndexError:
        raise ValueError(f"the records end before record {i} of {n}") from None
    return starts


def _record_starts_long(raw: bytes, n: int, starts: list[int], i: int) -> list[int]:
    p = starts[i]
    end = len(raw) - PAD_BYTES
    for i in range(i, n):
        starts[i] = p
        try:
            length, p = record_headers.read_varint(raw, p, end)
        except HeaderFormatError as e:
            raise ValueError(f"record {i}'s length: {e}") from None
        if length < RECORD_BODY_MIN_BYTES:
            raise ValueError(f"record {i} is {length} bytes long")
        p += length
    return starts


def _two_byte_tables() -> tuple[np.ndarray, np.ndarray]:
    """For two bytes (first | second << 8): the zigzag varint they start with and its
    length, when it takes one or two bytes (length 0 when it takes more)."""
    first = np.arange(1 << 16) & 0xFF
    second = np.arange(1 << 16) >> 8
    z = np.where(first < 0x80, first, (first & 0x7F) | (second << 7))
    lengths = np.where(first < 0x80, 1, np.where(second < 0x80, 2, 0))
    return ((z >> 1) ^ -(z & 1)).astype(np.int64), lengths.astype(np.int64)


_TWO_BYTE_VALUES, _TWO_BYTE_LENGTHS = _two_byte_tables()


def _varints(arr: np.ndarray, pos: np.ndarray, max_bytes: int, what: str):
    """Decode one zigzag varint per record at ``pos``: (values int64, positions after).
    ``arr`` has a pad byte after the last ``pos``."""
    two = arr[pos].astype(np.intp) | (arr[pos + 1].astype(np.intp) << 8)
    lengths = _TWO_BYTE_LENGTHS[two]
    if lengths.all():  # every varint takes one or two bytes: one look-up
        return _TWO_BYTE_VALUES[two], pos + lengths
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
    padded = raw + bytes(PAD_BYTES)
    record_starts = np.array(_record_starts(padded, n), np.int64)
    arr = np.frombuffer(padded, np.uint8)
    lengths, starts = _varints(arr, record_starts, VARINT_BYTES_MAX, "record length")
    ends = starts + lengths
    if int(lengths.min()) < RECORD_BODY_MIN_BYTES:
        bad = int(np.flatnonzero(lengths < RECORD_BODY_MIN_BYTES)[0])
        raise ValueError(f"record {bad} is {int(lengths[bad])} bytes long")
    if not np.array_equal(ends[:-1], record_starts[1:]) or int(ends[-1]) != len(raw):
        raise ValueError(f"{n} records do not fill the batch's {len(raw)} bytes")

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
        raise ValueError(f"record {bad} has offset delta {int(offsets[bad])}")
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
    if not -2**63 <= first_timestamp + int(deltas.min()) <= \
            first_timestamp + int(deltas.max()) < 2**63:
        raise ValueError("timestamps out of the 64-bit range")
    timestamps = deltas + first_timestamp
    return RecordColumns(timestamps, key_lengths,
                         _gather(raw, key_starts, np.maximum(key_lengths, 0)), value_lengths,
                         _gather(raw, value_starts, np.maximum(value_lengths, 0)),
                         header_lengths, header_data)


def decode_scalar(raw: bytes, n: int, first_timestamp: int) -> RecordColumns:
    """``decode`` record by record in Python, its columns as lists: for a few records,
    where numpy's fixed cost per call is the larger part (a linger.ms=0 producer)."""
    read = record_headers.read_varint
    timestamps, key_lengths, value_lengths, header_lengths = [], [], [], []
    keys, values, headers = [], [], []
    p, end = 0, len(raw)
    try:
        for i in range(n):
            length, p = read(raw, p, end)
            record_end = p + length
            if length < RECORD_BODY_MIN_BYTES or record_end > end:
                raise ValueError(f"record {i} is {length} bytes long, {end - p} left")
            delta, p = read(raw, p + 1, record_end, VARLONG_BYTES_MAX)  # after attributes
            offset_delta, p = read(raw, p, record_end)
            if offset_delta != i:
                raise ValueError(f"record {i} has offset delta {offset_delta}")
            timestamps.append(first_timestamp + delta)
            for lengths, parts in ((key_lengths, keys), (value_lengths, values)):
                size, p = read(raw, p, record_end)
                if size < -1 or p + size > record_end:
                    raise ValueError(f"record {i}: a field of {size} bytes")
                lengths.append(size)
                if size > 0:
                    parts.append(raw[p:p + size])
                    p += size
            header_end = record_headers.entry_end(raw, p, record_end) if p < record_end \
                else -1
            if header_end != record_end:
                raise ValueError(f"record {i}: its fields do not fill its length")
            entry = raw[p:record_end] if raw[p] else b""  # count 0: no headers
            header_lengths.append(len(entry))
            headers.append(entry)
            p = record_end
    except HeaderFormatError as e:
        raise ValueError(f"record {len(timestamps)}: {e}") from None
    if p != end:
        raise ValueError(f"{n} records end at byte {p} of {end}")
    if not -2**63 <= min(timestamps) <= max(timestamps) < 2**63:
        raise ValueError("timestamps out of the 64-bit range")
    with_headers = any(header_lengths)
    return RecordColumns(timestamps, key_lengths, b"".join(keys), value_lengths,
                         b"".join(values), header_lengths if with_headers else None,
                         b"".join(headers) if with_headers else None)


def _entry_end(raw: bytes, start: int, end: int) -> int:
    try:
        return record_headers.entry_end(raw, start, end)
    except HeaderFormatError as e:
        raise ValueError(f"record headers: {e}") from None


# ---------------------------------------------------------------- encoding

# Zigzag varints of -TABLE_HALF..TABLE_HALF-1, precomputed (3 bytes at most): a record's
# lengths and deltas are nearly always in this range, so one look-up encodes a column.
TABLE_HALF = 1 << 15


def _varint_bytes(values: np.ndarray):
    """Zigzag varints of ``values`` (int64[n]): (uint8 matrix [n, width], lengths)."""
    if len(values) and -TABLE_HALF <= int(values.min()) and \
            int(values.max()) < TABLE_HALF:
        index = values + TABLE_HALF
        lengths = _TABLE_LENGTHS[index]
        width = int(lengths.max())
        return _TABLE[index, :width], lengths
    return _computed_varint_bytes(values)


def _computed_varint_bytes(values: np.ndarray):
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


_TABLE, _TABLE_LENGTHS = _computed_varint_bytes(np.arange(-TABLE_HALF, TABLE_HALF))
assert _TABLE.shape == (2 * TABLE_HALF, 3)


def _ragged(parts) -> bytes:
    """Row-wise concatenation of ``(matrix, mask)`` parts (mask None: the whole part),
    keeping the masked bytes of each row: all rows' bytes back to back."""
    matrix = np.concatenate([m for m, _ in parts], axis=1)
    mask = np.concatenate([np.ones(m.shape, bool) if k is None else k for m, k in parts],
                          axis=1)
    return matrix[mask].tobytes()


def _mask(lengths: np.ndarray, width: int) -> np.ndarray:
    return _WIDTHS[:width] < lengths[..., None]


_WIDTHS = np.arange(16)  # a varint matrix is at most 3 (table) or 10 bytes wide


# ``encode`` works on this many records at a time: its matrices then stay in the CPU's
# caches (a 10,000-record batch in one piece is slower per record than in ten).
ENCODE_CHUNK_RECORDS = 1024


def encode(columns: RecordColumns, timestamp_base: int) -> bytes:
    """Kafka v2 records for ``columns`` (offset deltas 0..n-1, timestamps relative to
    ``timestamp_base``), back to back."""
    n = columns.count
    if n <= ENCODE_CHUNK_RECORDS:
        return _encode(columns, timestamp_base, 0)
    key_bounds = _bounds(np.maximum(columns.key_lengths, 0))
    value_bounds = _bounds(np.maximum(columns.value_lengths, 0))
    header_bounds = None if columns.header_lengths is None else \
        _bounds(columns.header_lengths)
    pieces = []
    for a in range(0, n, ENCODE_CHUNK_RECORDS):
        b = min(a + ENCODE_CHUNK_RECORDS, n)
        pieces.append(_encode(RecordColumns(
            columns.timestamps[a:b], columns.key_lengths[a:b],
            columns.key_data[key_bounds[a]:key_bounds[b]], columns.value_lengths[a:b],
            columns.value_data[value_bounds[a]:value_bounds[b]],
            None if header_bounds is None else columns.header_lengths[a:b],
            None if header_bounds is None else
            columns.header_data[header_bounds[a]:header_bounds[b]]), timestamp_base, a))
    return b"".join(pieces)


def _encode(columns: RecordColumns, timestamp_base: int, first_offset_delta: int) -> bytes:
    """``encode`` for records whose offset deltas start at ``first_offset_delta``.

    Every varint of every record is computed at once (numpy, two table look-ups). Then,
    without headers and with keys and values of about one size, each record is one row
    of a matrix [previous record's header count 0x00 | length | attributes | timestamp
    delta | offset delta | key length | key | value length | value] and one boolean
    compaction of the rows is the records; otherwise one ``bytes.join`` of small glue
    pieces and slices of the key, value and header sections.
    """
    n = columns.count
    key_bytes = np.maximum(columns.key_lengths, 0)
    value_bytes = np.maximum(columns.value_lengths, 0)
    header_lengths = columns.header_lengths
    tail_bytes = 1 if header_lengths is None else np.maximum(header_lengths, 1)
    # timestamp delta, offset delta, key length, value length: one look-up for all
    fields = np.empty((n, 4), np.int64)
    fields[:, 0] = columns.timestamps
    fields[:, 0] -= timestamp_base
    fields[:, 1] = np.arange(first_offset_delta, first_offset_delta + n)
    fields[:, 2] = columns.key_lengths
    fields[:, 3] = columns.value_lengths
    field_bytes, field_lengths = _varint_bytes(fields.ravel())
    width = field_bytes.shape[1]
    field_bytes = field_bytes.reshape(n, 4 * width)
    field_lengths = field_lengths.reshape(n, 4)
    field_mask = _mask(field_lengths, width).reshape(n, 4 * width)
    body = 1 + field_lengths.sum(axis=1) + key_bytes + value_bytes + tail_bytes
    length_bytes, length_lengths = _varint_bytes(body)
    length_mask = _mask(length_lengths, length_bytes.shape[1])
    head = 3 * width  # timestamp delta, offset delta, key length
    zero = np.zeros((n, 1), np.uint8)
    if header_lengths is None and _rows_fit(n, key_bytes, value_bytes):
        previous_tail = (zero, (np.arange(n) > 0)[:, None])
        records = _ragged([previous_tail, (length_bytes, length_mask), (zero, None),
                           (field_bytes[:, :head], field_mask[:, :head]),
                           _rows(columns.key_data, key_bytes),
                           (field_bytes[:, head:], field_mask[:, head:]),
                           _rows(columns.value_data, value_bytes)])
        return records + b"\x00"
    prefix = _ragged([(length_bytes, length_mask), (zero, None),
                      (field_bytes[:, :head], field_mask[:, :head])])
    middle = _ragged([(field_bytes[:, head:], field_mask[:, head:])])
    pieces = [b""] * (5 * n)
    pieces[0::5] = _slices(prefix, _bounds(length_lengths + 1 + field_lengths[:, :3].sum(1)))
    pieces[1::5] = _slices(bytes(columns.key_data), _bounds(key_bytes))
    pieces[2::5] = _slices(middle, _bounds(field_lengths[:, 3]))
    pieces[3::5] = _slices(bytes(columns.value_data), _bounds(value_bytes))
    if header_lengths is None:
        pieces[4::5] = [b"\x00"] * n
    else:
        entries = _slices(bytes(columns.header_data), _bounds(header_lengths))
        pieces[4::5] = [entry or b"\x00" for entry in entries]
    return b"".join(pieces)


# ``encode`` lays records out as rows of a matrix when the padding (rows as wide as the
# longest key and value) costs at most this many times the bytes themselves, plus a
# little a record.
ROWS_PADDING_RATIO = 2
ROWS_PADDING_SLACK_BYTES = 64


def _rows_fit(n: int, key_bytes: np.ndarray, value_bytes: np.ndarray) -> bool:
    padded = n * (int(key_bytes.max()) + int(value_bytes.max()))
    return padded <= ROWS_PADDING_RATIO * int(key_bytes.sum() + value_bytes.sum()) + \
        ROWS_PADDING_SLACK_BYTES * n


def _rows(data, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """The pieces of ``data`` (``lengths`` back to back) as rows of a matrix, each left
    aligned, and the mask of their bytes (None: every byte)."""
    n = len(lengths)
    width = int(lengths.max())
    flat = np.frombuffer(data, np.uint8)
    if int(lengths.min()) == width:
        return flat.reshape(n, width), None  # all one size: a view, no copy
    matrix = np.empty((n, width), np.uint8)
    mask = np.arange(width) < lengths[:, None]
    matrix[mask] = flat
    return matrix, mask


def _bounds(lengths: np.ndarray) -> list[int]:
    """Offsets 0, l0, l0 + l1, ... as a list (n + 1 entries)."""
    bounds = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    return bounds.tolist()


def _slices(data: bytes, bounds: list[int]) -> list[bytes]:
    return [data[a:b] for a, b in zip(bounds, bounds[1:])]


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
