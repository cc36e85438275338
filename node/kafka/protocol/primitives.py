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


def truncated(what: str) -> KafkaProtocolError:
    return KafkaProtocolError(f"{what}: length past the end of the message")


def null_error(what: str) -> KafkaProtocolError:
    return KafkaProtocolError(f"{what}: null is not allowed in this version")


def absent_error(what: str, versions: str) -> KafkaProtocolError:
    return KafkaProtocolError(
        f"{what} is not in this version (only in {versions}) and has a non-default value")


# ---- decoding variable-length values -------------------------------------------------

def read_string(buf, pos: int, n: int, what: str) -> tuple[str, int]:
    end = pos + n
    if n < 0 or end > len(buf):
        raise truncated(what)
    return str(buf[pos:end], "utf-8"), end


def read_bytes(buf, pos: int, n: int, what: str) -> tuple[bytes, int]:
    end = pos + n
    if n < 0 or end > len(buf):
        raise truncated(what)
    return bytes(buf[pos:end]), end


def read_view(buf, pos: int, n: int, what: str):
    end = pos + n
    if n < 0 or end > len(buf):
        raise truncated(what)
    return buf[pos:end], end


def check_count(buf, pos: int, n: int, element_bytes_min: int, what: str) -> None:
    """An array of ``n`` elements of at least ``element_bytes_min`` bytes must fit."""
    if n < 0 or n * element_bytes_min > len(buf) - pos:
        raise KafkaProtocolError(f"{what}: array of {n} elements longer than the message")


def read_array_int(buf, pos: int, n: int, fmt: str, size: int, what: str):
    check_count(buf, pos, n, size, what)
    return list(struct.unpack_from(f">{n}{fmt}", buf, pos)), pos + n * size


def read_uuid(buf, pos: int) -> tuple[uuid.UUID, int]:
    hi, lo = S_UUID.unpack_from(buf, pos)
    return uuid.UUID(int=(hi << 64) | lo), pos + 16


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


# ---- encoding variable-length values -------------------------------------------------

def byte_length(value) -> int:
    if type(value) is memoryview:
        return value.nbytes
    return len(value)


def as_piece(value):
    """A bytes-like value as a piece whose len() is its size in bytes."""
    if type(value) is memoryview and (value.itemsize != 1 or value.ndim != 1):
        return value.cast("B")
    return value


def records_pieces(value) -> tuple[list, int]:
    """``records`` may be one bytes-like object or a list/tuple of them (sent back to back)."""
    if isinstance(value, (list, tuple)):
        pieces = [as_piece(v) for v in value]
    else:
        pieces = [as_piece(value)]
    return pieces, sum(map(len, pieces))


def write_tags(out: list, tagged: list) -> None:
    """Write a tagged-fields section: ``tagged`` is [(tag, pieces)] in ascending tag order."""
    out.append(uvarint_bytes(len(tagged)))
    for tag, pieces in tagged:
        out.append(uvarint_bytes(tag))
        out.append(uvarint_bytes(sum(map(len, pieces))))
        out.extend(pieces)
