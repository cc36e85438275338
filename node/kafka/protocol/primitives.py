"""Kafka's primitive encodings and the codec's errors.

- ``KafkaProtocolError`` is the one exception malformed input raises (``codec`` turns the
  struct/index/UTF-8 errors of a short or bad buffer into it).
- Unsigned varints (KIP-482's compact lengths, tag numbers and sizes) are at most
  ``UVARINT_BYTES_MAX`` bytes, as in Kafka's ``ByteUtils.readUnsignedVarint``.
- ``readers`` and ``writers`` build the variable-length values on these.
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
UVARINT_SMALL = tuple(bytes((n,)) for n in range(0x80))


def uvarint_bytes(n: int) -> bytes:
    """Kafka's unsigned varint of ``n`` (0 <= n < 2**32)."""
    if n < 0x80:
        if n < 0:
            raise KafkaProtocolError(f"cannot encode {n} as an unsigned varint")
        return UVARINT_SMALL[n]
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
