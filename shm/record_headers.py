"""Record headers as ``shm.batch`` stores them: Kafka's own header encoding. Sans-I/O.

A batch with record headers (``shm.batch.ATTR_HEADERS``) has one entry per record in its
headers column. An entry is exactly the tail of a Kafka v2 record after its value, so a
Kafka listener copies bytes both ways instead of re-encoding:

    header_count varint
    header_count times:  key_length varint | key (UTF-8) | value_length varint | value

Varints are Kafka's: zigzag, 7 bits a byte, least significant group first. A value length
of -1 is a null value; a key is never null. An EMPTY entry (zero bytes) also means "no
headers", so a batch where most records have none costs one offsets slot per record.

Keys decode as ``str`` with ``surrogateescape``: Kafka's clients may send any bytes as a
key (librdkafka does not check UTF-8), and what comes in goes out again byte for byte.
"""
from __future__ import annotations

# Kafka's limits: a varint is at most 5 bytes, a varlong 10.
VARINT_BYTES_MAX = 5
VARLONG_BYTES_MAX = 10

Header = tuple[str, "bytes | None"]


class HeaderFormatError(ValueError):
    """A headers entry (or a varint in it) is malformed: the caller turns it into its own
    error (``CorruptRecordError`` for the log, ``RecordError`` for the Kafka listener)."""


def read_varint(data, position: int, end: int, max_bytes: int = VARINT_BYTES_MAX):
    """(value, next position) of the zigzag varint at ``position``; ``end`` bounds it."""
    shift = 0
    raw = 0
    limit = min(end, position + max_bytes)
    while position < limit:
        b = data[position]
        position += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
    if position >= end:
        raise HeaderFormatError("truncated varint")
    raise HeaderFormatError(f"varint longer than {max_bytes} bytes")


def write_varint(value: int, out: bytearray) -> None:
    """Append ``value`` as a zigzag varint (64-bit zigzag: fits varints and varlongs)."""
    assert -(1 << 63) <= value < (1 << 63), value
    raw = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while raw >= 0x80:
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7
    out.append(raw)


def entry_end(data, position: int, end: int) -> int:
    """Walk one entry starting at ``position`` (bounded by ``end``); returns where it
    ends. Raises HeaderFormatError on anything malformed. One-byte varints (nearly
    every header's) are read inline: every batch with headers is checked this way."""
    if position == end:
        return end
    count, position = _varint_at(data, position, end)
    if count < 0:
        raise HeaderFormatError(f"negative header count {count}")
    for _ in range(count):
        if position < end and data[position] < 0x80:
            key_length = (data[position] >> 1) ^ -(data[position] & 1)
            position += 1
        else:
            key_length, position = read_varint(data, position, end)
        if key_length < 0:
            raise HeaderFormatError(f"header key length {key_length}")
        position += key_length
        if position >= end:
            raise HeaderFormatError("header key runs past the record")
        if data[position] < 0x80:
            value_length = (data[position] >> 1) ^ -(data[position] & 1)
            position += 1
        else:
            value_length, position = read_varint(data, position, end)
        if value_length < -1:
            raise HeaderFormatError(f"header value length {value_length}")
        if value_length > 0:
            position += value_length
        if position > end:
            raise HeaderFormatError("header value runs past the record")
    return position


def check_entries(data, offsets) -> None:
    """Every entry ``data[offsets[i]:offsets[i+1]]`` is well formed and exactly filled."""
    bounds = offsets.tolist() if hasattr(offsets, "tolist") else list(offsets)
    view = memoryview(data)
    checked = b""   # the last entry walked: a run of equal entries is walked once
    for start, end in zip(bounds, bounds[1:]):
        if start == end:
            continue
        if end - start == len(checked) and view[start:end] == checked:
            continue
        if entry_end(data, start, end) != end:
            raise HeaderFormatError("bytes left after a record's headers")
        checked = view[start:end]


def decode_entry(data) -> list[Header]:
    """The headers of one entry, in order: ``[(key, value or None), ...]``. Per-record
    work of every consumer that asks for headers, so the one-byte varints (lengths up to
    63, counts up to 63: nearly every header) are read inline."""
    data = bytes(data)
    end = len(data)
    if not end:
        return []
    count, position = _varint_at(data, 0, end)
    if count < 0:
        raise HeaderFormatError(f"negative header count {count}")
    headers = []
    for _ in range(count):
        if position < end and data[position] < 0x80:
            key_length = (data[position] >> 1) ^ -(data[position] & 1)
            position += 1
        else:
            key_length, position = read_varint(data, position, end)
        if key_length < 0 or position + key_length > end:
            raise HeaderFormatError("header key runs past the record")
        key = data[position:position + key_length].decode("utf-8", "surrogateescape")
        position += key_length
        if position < end and data[position] < 0x80:
            value_length = (data[position] >> 1) ^ -(data[position] & 1)
            position += 1
        else:
            value_length, position = read_varint(data, position, end)
        if value_length < 0:
            if value_length != -1:
                raise HeaderFormatError("header value runs past the record")
            headers.append((key, None))
            continue
        if position + value_length > end:
            raise HeaderFormatError("header value runs past the record")
        headers.append((key, data[position:position + value_length]))
        position += value_length
    if position != end:
        raise HeaderFormatError("bytes left after a record's headers")
    return headers


def _varint_at(data: bytes, position: int, end: int):
    """``read_varint`` with the one-byte case inline."""
    if position < end and data[position] < 0x80:
        b = data[position]
        return (b >> 1) ^ -(b & 1), position + 1
    return read_varint(data, position, end)


def encode_entry(headers) -> bytes:
    """One entry for ``headers`` (``[(key str|bytes, value bytes|None), ...]``): empty
    for no headers."""
    if not headers:
        return b""
    out = bytearray()
    write_varint(len(headers), out)
    for key, value in headers:
        key_bytes = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
        write_varint(len(key_bytes), out)
        out += key_bytes
        if value is None:
            write_varint(-1, out)
        else:
            value = bytes(value)
            write_varint(len(value), out)
            out += value
    return bytes(out)


def encode_entries(headers) -> list[bytes]:
    """One entry per record of ``headers`` (per record None or its headers), as
    ``encode_entry``; a run of equal header lists (the same headers on every record)
    is encoded once."""
    entries = []
    previous, entry = None, b""
    for h in headers:
        if h != previous:
            previous, entry = h, encode_entry(h)
        entries.append(entry)
    return entries
