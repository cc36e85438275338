"""Readers of Kafka's variable-length values, for the generated decoders.

Naming: ``16``/``32`` the classic int16/int32 length prefix, ``c`` the compact one of
flexible versions (an unsigned varint of length + 1, 0 for null); a trailing ``n``: null
allowed (read as None). Each returns (value, next position). Every length is checked
against what is left of ``buf`` before anything is sliced or allocated.
"""

import struct
import uuid

from .primitives import (S_INT8, S_INT16, S_INT32, S_UUID, KafkaProtocolError, null_error,
                         read_uvarint, truncated)


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


