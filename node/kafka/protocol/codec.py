"""Requests and responses with their headers, sans-I/O: the entry points of the codec.

Header versions (Kafka's rules): a request's header is v2 (with tagged fields) when its API
version is flexible, else v1; a response's header is v1 (with tagged fields) when flexible,
else v0 - except ApiVersions, whose response header is always v0 so that a client can read
it whatever version it asked for. ClientId is a classic nullable string in both request
header versions.
"""

import struct
from dataclasses import dataclass

from . import messages
from .primitives import (S_INT16, S_INT32, KafkaProtocolError, UnsupportedVersion, read_string,
                         tag_fields)

API_VERSIONS_KEY = 18
_REQUEST_START = struct.Struct(">hhi")  # api key, api version, correlation id
# What malformed input can make the generated decoders raise (besides KafkaProtocolError).
_DECODE_ERRORS = (struct.error, IndexError, ValueError)
# What a wrong object can make the generated encoders raise.
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, ValueError, OverflowError)

VALID_VERSIONS: dict[int, tuple[int, int]] = {
    key: cls.VALID_VERSIONS for key, cls in sorted(messages.REQUESTS.items())}
API_NAMES: dict[int, str] = {
    key: cls.__name__.removesuffix("Request") for key, cls in sorted(messages.REQUESTS.items())}


@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None = None


def request_class(api_key: int) -> type:
    return messages.REQUESTS[api_key]


def response_class(api_key: int) -> type:
    return messages.RESPONSES[api_key]


def is_flexible(cls: type, version: int) -> bool:
    return cls.FLEXIBLE_FROM is not None and version >= cls.FLEXIBLE_FROM


def _view(data) -> memoryview:
    view = memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    return view


def _check_version(cls: type, version: int) -> None:
    low, high = cls.VALID_VERSIONS
    if not low <= version <= high:
        raise KafkaProtocolError(f"{cls.__name__} has no version {version} ({low}-{high})")


# ---- bodies ----------------------------------------------------------------------------

def encode_body(message, version: int, out: list) -> None:
    """Append the pieces of ``message`` at ``version`` to ``out``."""
    cls = type(message)
    _check_version(cls, version)
    low, encoders = messages.ENCODERS[cls]
    try:
        encoders[version - low](message, out)
    except _ENCODE_ERRORS as e:
        raise KafkaProtocolError(f"cannot encode {cls.__name__} v{version}: {e}") from e


def decode_body(cls: type, version: int, buf, pos: int = 0, *, exact: bool = True):
    """The message of class ``cls`` at ``version`` filling ``buf[pos:]`` exactly (or, not
    ``exact``, starting there: what follows it is ignored)."""
    _check_version(cls, version)
    buf = _view(buf)
    low, decoders = messages.DECODERS[cls]
    try:
        message, pos = decoders[version - low](buf, pos)
    except _DECODE_ERRORS as e:
        raise KafkaProtocolError(f"malformed {cls.__name__} v{version}: {e}") from None
    if exact and pos != len(buf):
        raise KafkaProtocolError(
            f"{cls.__name__} v{version}: {len(buf) - pos} bytes after the end of the message")
    return message


def _join(out: list) -> bytes:
    """Fill in the size prefix (out[0]) and join: one copy of the payload."""
    out[0] = S_INT32.pack(sum(map(len, out)))
    return b"".join(out)


# ---- the broker's side ------------------------------------------------------------------

def decode_request(payload) -> tuple[RequestHeader, object]:
    """A request payload (without its size prefix) -> (header, request)."""
    buf = _view(payload)
    if len(buf) < _REQUEST_START.size:
        raise KafkaProtocolError(f"request of {len(buf)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _REQUEST_START.unpack_from(buf, 0)
    cls = messages.REQUESTS.get(api_key)
    if cls is None or not cls.VALID_VERSIONS[0] <= api_version <= cls.VALID_VERSIONS[1]:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    try:
        pos = _REQUEST_START.size
        n, = S_INT16.unpack_from(buf, pos)
        pos += 2
        if n == -1:
            client_id = None
        else:
            client_id, pos = read_string(buf, pos, n, "RequestHeader.ClientId")
        if is_flexible(cls, api_version):
            if buf[pos] == 0:
                pos += 1
            else:
                pos = tag_fields(buf, pos, "RequestHeader")[1]
    except _DECODE_ERRORS as e:
        raise KafkaProtocolError(f"malformed request header: {e}") from None
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    # Kafka's broker ignores what follows a request in its frame, and clients rely on it:
    # librdkafka 2.16's Metadata v12 ends with 3 bytes past the message.
    return header, decode_body(cls, api_version, buf, pos, exact=False)


def encode_response(header: RequestHeader, response) -> bytes:
    """The response to the request with ``header``, with its size prefix."""
    cls = type(response)
    if messages.RESPONSES.get(header.api_key) is not cls:
        raise KafkaProtocolError(f"{cls.__name__} is not the response to API key {header.api_key}")
    out = [b"", S_INT32.pack(header.correlation_id)]
    if header.api_key != API_VERSIONS_KEY and is_flexible(cls, header.api_version):
        out.append(b"\x00")
    encode_body(response, header.api_version, out)
    return _join(out)


# ---- the client's side ------------------------------------------------------------------

def encode_request(header: RequestHeader, request) -> bytes:
    """``request`` with ``header``, with its size prefix."""
    cls = type(request)
    if messages.REQUESTS.get(header.api_key) is not cls:
        raise KafkaProtocolError(f"{cls.__name__} is not a request of API key {header.api_key}")
    out = [b"", _REQUEST_START.pack(header.api_key, header.api_version, header.correlation_id)]
    if header.client_id is None:
        out.append(b"\xff\xff")
    else:
        client_id = header.client_id.encode("utf-8")
        if len(client_id) > 0x7FFF:
            raise KafkaProtocolError("client id longer than 32767 bytes")
        out.append(S_INT16.pack(len(client_id)))
        out.append(client_id)
    if is_flexible(cls, header.api_version):
        out.append(b"\x00")
    encode_body(request, header.api_version, out)
    return _join(out)


def decode_response(api_key: int, api_version: int, payload) -> tuple[int, object]:
    """A response payload (without its size prefix) -> (correlation id, response)."""
    cls = messages.RESPONSES.get(api_key)
    if cls is None:
        raise KafkaProtocolError(f"unknown API key {api_key}")
    buf = _view(payload)
    try:
        correlation_id, = S_INT32.unpack_from(buf, 0)
        pos = 4
        if api_key != API_VERSIONS_KEY and is_flexible(cls, api_version):
            if buf[pos] == 0:
                pos += 1
            else:
                pos = tag_fields(buf, pos, "ResponseHeader")[1]
    except _DECODE_ERRORS as e:
        raise KafkaProtocolError(f"malformed response header: {e}") from None
    return correlation_id, decode_body(cls, api_version, buf, pos)
