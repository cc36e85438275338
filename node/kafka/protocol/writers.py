"""Writers of Kafka's variable-length values, for the generated encoders.

Each appends bytes-like pieces to the list ``out`` (joined once by the caller); naming as in
``readers``: ``16``/``32`` classic length prefixes, ``c`` compact, a trailing ``n`` null
allowed. A bytes-like value is appended as it is (no copy) - ``records`` may even be a list
of them, written back to back.
"""

import struct

from .primitives import UVARINT_SMALL, S_INT16, S_INT32, null_error, uvarint_bytes


def _u(n: int) -> bytes:
    """``uvarint_bytes`` with the one-byte case inline, for the hot helpers below."""
    return UVARINT_SMALL[n] if 0 <= n < 0x80 else uvarint_bytes(n)


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
