"""A reference Kafka v2 record batch writer and reader for the tests, written record by
record from the format's description (Kafka's DefaultRecordBatch / DefaultRecord), so
the converter under test is checked against something that does not share its code.
"""
from __future__ import annotations

import struct

import cramjam
from crc32c import crc32c

HEADER = struct.Struct(">qiibIhiqqqhii")


def varint(value: int) -> bytes:
    z = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def read_varint(data: bytes, position: int) -> tuple[int, int]:
    shift = z = 0
    while True:
        b = data[position]
        position += 1
        z |= (b & 0x7F) << shift
        if b < 0x80:
            return (z >> 1) ^ -(z & 1), position
        shift += 7


def record(offset_delta: int, timestamp_delta: int, key, value, headers=()) -> bytes:
    body = bytearray(b"\x00")  # attributes
    body += varint(timestamp_delta) + varint(offset_delta)
    for field in (key, value):
        body += varint(-1) if field is None else varint(len(field)) + field
    body += varint(len(headers))
    for hkey, hvalue in headers:
        hkey = hkey.encode() if isinstance(hkey, str) else hkey
        body += varint(len(hkey)) + hkey
        body += varint(-1) if hvalue is None else varint(len(hvalue)) + hvalue
    return varint(len(body)) + bytes(body)


def xerial(data: bytes, block: int = 32 * 1024) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for start in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[start:start + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return out


COMPRESS = {
    1: lambda d: bytes(cramjam.gzip.compress(d)),
    2: xerial,
    3: lambda d: bytes(cramjam.lz4.compress(d)),  # lz4's defaults (linked blocks): any frame reads
    4: lambda d: bytes(cramjam.zstd.compress(d)),
}


def batch(rows, *, first_timestamp: int = 1_000, base_offset: int = 0,
          leader_epoch: int = -1, attributes: int = 0, producer_id: int = -1,
          producer_epoch: int = -1, base_sequence: int = -1, max_timestamp=None,
          count=None, last_offset_delta=None, raw_records: bytes | None = None,
          snappy_raw: bool = False) -> bytes:
    """rows: (timestamp_delta, key, value, headers) per record, offset deltas 0..n-1."""
    records = raw_records if raw_records is not None else b"".join(
        record(i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(rows))
    codec = attributes & 7
    if codec == 2 and snappy_raw:
        records = bytes(cramjam.snappy.compress_raw(records))
    elif codec:
        records = COMPRESS[codec](records)
    n = len(rows) if count is None else count
    if max_timestamp is None:
        max_timestamp = first_timestamp + max((r[0] for r in rows), default=0)
    out = bytearray(HEADER.size) + records
    HEADER.pack_into(out, 0, base_offset, len(out) - 12, leader_epoch, 2, 0, attributes,
                     n - 1 if last_offset_delta is None else last_offset_delta,
                     first_timestamp, max_timestamp, producer_id, producer_epoch,
                     base_sequence, n)
    reseal(out)
    return bytes(out)


def reseal(buf: bytearray) -> None:
    """Recompute the CRC of the (one) batch in ``buf``."""
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))


def read(data: bytes):
    """Batches of ``data`` -> [(header fields dict, [(offset, timestamp, key, value,
    headers)])]; decompresses with cramjam; checks the CRC."""
    out = []
    position = 0
    names = ("base_offset batch_length leader_epoch magic crc attributes last_offset_delta "
             "first_timestamp max_timestamp producer_id producer_epoch base_sequence "
             "count").split()
    while position < len(data):
        h = dict(zip(names, HEADER.unpack_from(data, position)))
        end = position + h["batch_length"] + 12
        assert crc32c(data[position + 21:end]) == h["crc"], "CRC"
        raw = data[position + HEADER.size:end]
        codec = h["attributes"] & 7
        if codec == 2:
            raw = _unxerial(raw)
        elif codec:
            raw = bytes({1: cramjam.gzip, 3: cramjam.lz4, 4: cramjam.zstd}[codec].decompress(raw))
        records, p = [], 0
        for i in range(h["count"]):
            length, p = read_varint(raw, p)
            end_of_record = p + length
            p += 1
            ts, p = read_varint(raw, p)
            offset_delta, p = read_varint(raw, p)
            fields = []
            for _ in range(2):
                size, p = read_varint(raw, p)
                fields.append(None if size < 0 else raw[p:p + size])
                p += max(size, 0)
            count, p = read_varint(raw, p)
            headers = []
            for _ in range(count):
                size, p = read_varint(raw, p)
                hkey = raw[p:p + size].decode("utf-8", "surrogateescape")
                p += size
                size, p = read_varint(raw, p)
                headers.append((hkey, None if size < 0 else raw[p:p + size]))
                p += max(size, 0)
            assert p == end_of_record
            timestamp = h["max_timestamp"] if h["attributes"] & 8 else h["first_timestamp"] + ts
            records.append((h["base_offset"] + offset_delta, timestamp, *fields, headers))
        assert p == len(raw)
        out.append((h, records))
        position = end
    return out


def _unxerial(data: bytes) -> bytes:
    if not data.startswith(b"\x82SNAPPY\x00"):
        return bytes(cramjam.snappy.decompress_raw(data))
    p, out = 16, b""
    while p < len(data):
        (size,) = struct.unpack_from(">i", data, p)
        out += bytes(cramjam.snappy.decompress_raw(data[p + 4:p + 4 + size]))
        p += 4 + size
    return out
