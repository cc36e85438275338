"""Kafka's primitive encodings, for the generated ``messages`` module.

Rules (the generated decoders rely on them):
- Every length read from the wire is checked against what is left in the buffer *before*
  anything is allocated or sliced; a bad length raises ``KafkaProtocolError``.
- Decoders read from a ``memoryview`` (``records`` come back as zero-copy slices of it).
- Encoders append bytes-like pieces to a list; the caller joins them once.
- Unsigned varints (KIP-482's compact lengths, tag numbers and sizes) are at most
  ``UVARINT_BYTES_MAX`` bytes, as in Kafka's ``ByteUtils.readUnsignedVarint``.
"""

import struct
import uuid

UVARINT_BYTES_MAX = 5
UUID_ZERO = uuid.UUID(int=0)


class KafkaProtocolError(Exception):
    """Bytes that are not a valid Kafka message, or an object that cannot be encoded."""


class UnsupportedVersion(KafkaProtocolError):
    """A request whose API key or version this codec does not know.

    The three fields sit at fixed places at the start of every request header, so they
    are read even when the rest of the request cannot be."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int):
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id


# Structs shared by the generated code.
S_INT8 = struct.Struct(">b")
S_INT16 = struct.Struct(">h")
S_INT32 = struct.Struct(">i")
S_UUID = struct.Struct(">QQ")

# One-byte unsigned varints, the common case of every compact length.
_UVARINT_SMALL = tuple(bytes((n,)) for n in range(0x80))


def uvarint_bytes(n: int) -> bytes:
    """Kafka's unsigned varint of ``n`` (0 <= n < 2**32)."""
    if n < 0x80:
        if n < 0:
            raise KafkaProtocolError(f"cannot encode {n} as an unsigned varint")
        return _UVARINT_SMALL[n]
    if n >= 1 << 32:
        raise KafkaProtocolError(f"cannot encode {n} as an unsigned varint")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """(value, next position); at most ``UVARINT_BYTES_MAX`` bytes."""
    end = len(buf)
    value = 0
    shift = 0
    for _ in range(UVARINT_BYTES_MAX):
        if pos >= end:
            raise KafkaProtocolError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise KafkaProtocolError("varint longer than 5 bytes")


def _u(n: int) -> bytes:
    """``uvarint_bytes`` with the one-byte case inline, for the hot helpers below."""
    return _UVARINT_SMALL[n] if 0 <= n < 0x80 else uvarint_bytes(n)


def truncated(what: str) -> KafkaProtocolError:
    return KafkaProtocolError(f"{what}: length past the end of the message")


def null_error(what: str) -> KafkaProtocolError:
    return KafkaProtocolError(f"{what}: null is not allowed in this version")


def absent_error(what: str, versions: str) -> KafkaProtocolError:
    return KafkaProtocolError(
        f"{what} is not in this version (only in {versions}) and has a non-default value")


# ---- decoding --------------------------------------------------------------------------
# Naming: ``16``/``32`` the classic int16/int32 length prefix, ``c`` the compact (varint
# length + 1) one of flexible versions; a trailing ``n``: null allowed (decoded as None).

def read_uuid(buf, pos: int):
    hi, lo = S_UUID.unpack_from(buf, pos)
    return uuid.UUID(int=(hi << 64) | lo), pos + 16


def _read_clen(buf, pos: int) -> tuple[int, int]:
    """A compact length: (length, or -1 for null; next position)."""
    n = buf[pos]
    if n < 0x80:
        return n - 1, pos + 1
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _null(n: int, what: str) -> None:
    if n != -1:
        raise KafkaProtocolError(f"{what}: negative length {n}")


def read_str16(buf, pos, what):
    n, = S_INT16.unpack_from(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + 2 + n
    if end > len(buf):
        raise truncated(what)
    return str(buf[pos + 2:end], "utf-8"), end


def read_str16n(buf, pos, what):
    n, = S_INT16.unpack_from(buf, pos)
    if n < 0:
        _null(n, what)
        return None, pos + 2
    end = pos + 2 + n
    if end > len(buf):
        raise truncated(what)
    return str(buf[pos + 2:end], "utf-8"), end


def read_cstr(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return str(buf[pos:end], "utf-8"), end


def read_cstrn(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return str(buf[pos:end], "utf-8"), end


def read_bytes32(buf, pos, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + 4 + n
    if end > len(buf):
        raise truncated(what)
    return bytes(buf[pos + 4:end]), end


def read_bytes32n(buf, pos, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        _null(n, what)
        return None, pos + 4
    end = pos + 4 + n
    if end > len(buf):
        raise truncated(what)
    return bytes(buf[pos + 4:end]), end


def read_cbytes(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return bytes(buf[pos:end]), end


def read_cbytesn(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return bytes(buf[pos:end]), end


# Records are returned as zero-copy views of the message.
def read_records32(buf, pos, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + 4 + n
    if end > len(buf):
        raise truncated(what)
    return buf[pos + 4:end], end


def read_records32n(buf, pos, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        _null(n, what)
        return None, pos + 4
    end = pos + 4 + n
    if end > len(buf):
        raise truncated(what)
    return buf[pos + 4:end], end


def read_crecords(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        raise null_error(what)
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return buf[pos:end], end


def read_crecordsn(buf, pos, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise truncated(what)
    return buf[pos:end], end


def check_count(buf, pos: int, n: int, element_bytes_min: int, what: str) -> None:
    """An array of ``n`` elements of at least ``element_bytes_min`` bytes must fit."""
    if n * element_bytes_min > len(buf) - pos:
        raise KafkaProtocolError(f"{what}: array of {n} elements longer than the message")


def read_count32(buf, pos, element_bytes_min, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        raise null_error(what)
    check_count(buf, pos + 4, n, element_bytes_min, what)
    return n, pos + 4


def read_count32n(buf, pos, element_bytes_min, what):
    n, = S_INT32.unpack_from(buf, pos)
    if n < 0:
        _null(n, what)
    else:
        check_count(buf, pos + 4, n, element_bytes_min, what)
    return n, pos + 4


def read_ccount(buf, pos, element_bytes_min, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n < 0:
        raise null_error(what)
    check_count(buf, pos, n, element_bytes_min, what)
    return n, pos


def read_ccountn(buf, pos, element_bytes_min, what):
    n = buf[pos] - 1
    if n < 0x7F:
        pos += 1
    else:
        n, pos = _read_clen(buf, pos)
    if n >= 0:
        check_count(buf, pos, n, element_bytes_min, what)
    return n, pos


def read_structs(buf, pos, n, decode):
    """``n`` elements read by ``decode(buf, pos)``; None when n is -1 (null)."""
    if n < 0:
        return None, pos
    items = []
    append = items.append
    for _ in range(n):
        item, pos = decode(buf, pos)
        append(item)
    return items, pos


def read_ints(buf, pos, n, fmt, size):
    """``n`` fixed-size numbers of struct format ``fmt``; None when n is -1 (null)."""
    if n < 0:
        return None, pos
    return list(struct.unpack_from(f">{n}{fmt}", buf, pos)), pos + n * size


def read_nullable_struct(buf, pos, decode):
    """Kafka's nullable struct: an int8 marker (-1 null) before the struct."""
    marker, = S_INT8.unpack_from(buf, pos)
    if marker < 0:
        return None, pos + 1
    return decode(buf, pos + 1)


# Array elements (Kafka arrays never hold nulls).
def read_str16_item(buf, pos):
    return read_str16(buf, pos, "string array element")


def read_cstr_item(buf, pos):
    return read_cstr(buf, pos, "string array element")


def tag_fields(buf, pos: int, what: str) -> tuple[list, int]:
    """The tagged fields of a tagged-fields section as [(tag, start, end)], and the position
    after the section."""
    count, pos = read_uvarint(buf, pos)
    # Every tagged field takes at least two bytes (its tag and its size).
    check_count(buf, pos, count, 2, what)
    fields = []
    for _ in range(count):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise truncated(what)
        fields.append((tag, pos, end))
        pos = end
    return fields, pos


def skip_tags(buf, pos: int, what: str) -> int:
    return tag_fields(buf, pos, what)[1]


# ---- encoding --------------------------------------------------------------------------

def byte_length(value) -> int:
    if type(value) is memoryview:
        return value.nbytes
    return len(value)


def as_piece(value):
    """A bytes-like value as a piece whose len() is its size in bytes."""
    if type(value) is memoryview and (value.itemsize != 1 or value.ndim != 1):
        return value.cast("B")
    return value


def write_str16(out, v, what):
    if v is None:
        raise null_error(what)
    b = v.encode("utf-8")
    out.append(S_INT16.pack(len(b)))
    out.append(b)


def write_str16n(out, v, what):
    if v is None:
        out.append(b"\xff\xff")
    else:
        b = v.encode("utf-8")
        out.append(S_INT16.pack(len(b)))
        out.append(b)


def write_cstr(out, v, what):
    if v is None:
        raise null_error(what)
    b = v.encode("utf-8")
    out.append(_u(len(b) + 1))
    out.append(b)


def write_cstrn(out, v, what):
    if v is None:
        out.append(b"\x00")
    else:
        b = v.encode("utf-8")
        out.append(_u(len(b) + 1))
        out.append(b)


def write_bytes32(out, v, what):
    if v is None:
        raise null_error(what)
    out.append(S_INT32.pack(byte_length(v)))
    out.append(as_piece(v))


def write_bytes32n(out, v, what):
    if v is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        out.append(S_INT32.pack(byte_length(v)))
        out.append(as_piece(v))


def write_cbytes(out, v, what):
    if v is None:
        raise null_error(what)
    out.append(_u(byte_length(v) + 1))
    out.append(as_piece(v))


def write_cbytesn(out, v, what):
    if v is None:
        out.append(b"\x00")
    else:
        out.append(_u(byte_length(v) + 1))
        out.append(as_piece(v))


def records_pieces(value) -> tuple[list, int]:
    """``records`` may be one bytes-like object or a list/tuple of them (sent back to back)."""
    if isinstance(value, (list, tuple)):
        pieces = [as_piece(v) for v in value]
    else:
        pieces = [as_piece(value)]
    return pieces, sum(map(len, pieces))


def write_records32(out, v, what):
    if v is None:
        raise null_error(what)
    pieces, n = records_pieces(v)
    out.append(S_INT32.pack(n))
    out.extend(pieces)


def write_records32n(out, v, what):
    if v is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_records32(out, v, what)


def write_crecords(out, v, what):
    if v is None:
        raise null_error(what)
    pieces, n = records_pieces(v)
    out.append(_u(n + 1))
    out.extend(pieces)


def write_crecordsn(out, v, what):
    if v is None:
        out.append(b"\x00")
    else:
        write_crecords(out, v, what)


def write_array32(out, v, encode, what):
    if v is None:
        raise null_error(what)
    out.append(S_INT32.pack(len(v)))
    for item in v:
        encode(item, out)


def write_array32n(out, v, encode, what):
    if v is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_array32(out, v, encode, what)


def write_carray(out, v, encode, what):
    if v is None:
        raise null_error(what)
    out.append(_u(len(v) + 1))
    for item in v:
        encode(item, out)


def write_carrayn(out, v, encode, what):
    if v is None:
        out.append(b"\x00")
    else:
        write_carray(out, v, encode, what)


def write_ints32(out, v, fmt, what):
    if v is None:
        raise null_error(what)
    out.append(S_INT32.pack(len(v)))
    out.append(struct.pack(f">{len(v)}{fmt}", *v))


def write_ints32n(out, v, fmt, what):
    if v is None:
        out.append(b"\xff\xff\xff\xff")
    else:
        write_ints32(out, v, fmt, what)


def write_cints(out, v, fmt, what):
    if v is None:
        raise null_error(what)
    out.append(_u(len(v) + 1))
    out.append(struct.pack(f">{len(v)}{fmt}", *v))


def write_cintsn(out, v, fmt, what):
    if v is None:
        out.append(b"\x00")
    else:
        write_cints(out, v, fmt, what)


def write_struct(out, v, encode, what):
    if v is None:
        raise null_error(what)
    encode(v, out)


def write_struct_n(out, v, encode, what):
    if v is None:
        out.append(b"\xff")
    else:
        out.append(b"\x01")
        encode(v, out)


def write_str16_item(v, out):
    write_str16(out, v, "string array element")


def write_cstr_item(v, out):
    write_cstr(out, v, "string array element")


def write_uuid_item(v, out):
    out.append(v.bytes)


def write_tags(out: list, tagged: list) -> None:
    """Write a tagged-fields section: ``tagged`` is [(tag, pieces)] in ascending tag order."""
    out.append(uvarint_bytes(len(tagged)))
    for tag, pieces in tagged:
        out.append(uvarint_bytes(tag))
        out.append(uvarint_bytes(sum(map(len, pieces))))
        out.extend(pieces)
