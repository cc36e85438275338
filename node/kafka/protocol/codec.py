"""Requests and responses with their headers, sans-I/O: the entry points of the codec.

Header versions (Kafka's rules): a request's header is v2 (with tagged fields) when its API
version is flexible, else v1; a response's header is v1 (with tagged fields) when flexible,
else v0 - except ApiVersions, whose response header is always v0 so that a client can read
it whatever version it asked for. ClientId is a classic nullable string in both request
header versions.
"""

import struct
import sys
from dataclasses import dataclass

from . import messages
from .primitives import S_INT16, S_INT32, KafkaProtocolError, UnsupportedVersion
from .readers import read_str16n, skip_tags

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

def _tables(cls: type, name: str) -> dict:
    """ENCODERS or DECODERS of the generated module of ``cls`` (messages.py or
    coordinator_records.py)."""
    module = sys.modules.get(cls.__module__)
    table = getattr(module, name, None)
    if table is None or cls not in table:
        raise KafkaProtocolError(f"{cls.__name__} is not a generated Kafka message")
    return table


def encode_body(message, version: int, out: list) -> None:
    """Append the pieces of ``message`` at ``version`` to ``out``."""
    cls = type(message)
    _check_version(cls, version)
    low, encoders = _tables(cls, "ENCODERS")[cls]
    try:
        encoders[version - low](message, out)
    except _ENCODE_ERRORS as e:
        raise KafkaProtocolError(f"cannot encode {cls.__name__} v{version}: {e}") from e


def decode_body(cls: type, version: int, buf, pos: int = 0, *, exact: bool = True):
    """The message of class ``cls`` at ``version`` filling ``buf[pos:]`` exactly (or, not
    ``exact``, starting there: what follows it is ignored)."""
    _check_version(cls, version)
    buf = _view(buf)
    low, decoders = _tables(cls, "DECODERS")[cls]
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

# api key -> (first version, last version, first flexible version or None, decoders)
_REQUEST_DECODERS = {
    key: (*cls.VALID_VERSIONS, cls.FLEXIBLE_FROM, messages.DECODERS[cls][1])
    for key, cls in messages.REQUESTS.items()}


def decode_request(payload) -> tuple[RequestHeader, object]:
    """A request payload (without its size prefix) -> (header, request).

    Bytes after the end of the request are ignored, as Kafka's broker ignores them, and
    clients rely on it: librdkafka's all-topics Metadata v9+ leaves 3 bytes of its array
    count's int32 placeholder after the request (``rd_kafka_buf_write_arraycnt_pos``)."""
    buf = memoryview(payload)
    if type(payload) is not bytes:
        buf = _view(buf)
    if len(buf) < _REQUEST_START.size:
        raise KafkaProtocolError(f"request of {len(buf)} bytes is shorter than its header")
    api_key, api_version, correlation_id = _REQUEST_START.unpack_from(buf, 0)
    entry = _REQUEST_DECODERS.get(api_key)
    if entry is None or not entry[0] <= api_version <= entry[1]:
        raise UnsupportedVersion(api_key, api_version, correlation_id)
    low, _, flexible_from, decoders = entry
    try:
        client_id, pos = read_str16n(buf, _REQUEST_START.size, "RequestHeader.ClientId")
        if flexible_from is not None and api_version >= flexible_from:
            pos = pos + 1 if buf[pos] == 0 else skip_tags(buf, pos, "RequestHeader")
        request, pos = decoders[api_version - low](buf, pos)
    except _DECODE_ERRORS as e:
        name = messages.REQUESTS[api_key].__name__
        raise KafkaProtocolError(f"malformed {name} v{api_version}: {e}") from None
    return RequestHeader(api_key, api_version, correlation_id, client_id), request


# api key -> (response class, first version, last version, header bytes after the
# correlation id by version - b"\x00" (no tagged fields) where the header is v1 - encoders)
_RESPONSE_ENCODERS = {
    key: (cls, *cls.VALID_VERSIONS,
          tuple(b"\x00" if key != API_VERSIONS_KEY and is_flexible(cls, version) else b""
                for version in range(cls.VALID_VERSIONS[0], cls.VALID_VERSIONS[1] + 1)),
          messages.ENCODERS[cls][1])
    for key, cls in messages.RESPONSES.items()}


def encode_response_pieces(header: RequestHeader, response) -> list:
    """The response as bytes-like pieces, the size prefix first, for a vectored write
    (``socket.sendmsg``) that sends large records without joining them first."""
    entry = _RESPONSE_ENCODERS.get(header.api_key)
    cls = type(response)
    if entry is None or entry[0] is not cls:
        raise KafkaProtocolError(f"{cls.__name__} is not the response to API key {header.api_key}")
    _, low, high, header_ends, encoders = entry
    version = header.api_version
    if not low <= version <= high:
        raise KafkaProtocolError(f"{cls.__name__} has no version {version} ({low}-{high})")
    out = [b"", S_INT32.pack(header.correlation_id), header_ends[version - low]]
    try:
        encoders[version - low](response, out)
    except _ENCODE_ERRORS as e:
        raise KafkaProtocolError(f"cannot encode {cls.__name__} v{version}: {e}") from e
    out[0] = S_INT32.pack(sum(map(len, out)))
    return out


def encode_response(header: RequestHeader, response) -> bytes:
    """The response to the request with ``header``, with its size prefix."""
    return b"".join(encode_response_pieces(header, response))


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
    """A response payload (without its size prefix) -> (correlation id, response).

    Strict, unlike ``decode_request``: bytes after the response are an error (this side
    serves tests, tools and the fuzzer, which want to hear of them)."""
    cls = messages.RESPONSES.get(api_key)
    if cls is None:
        raise KafkaProtocolError(f"unknown API key {api_key}")
    buf = _view(payload)
    try:
        correlation_id, = S_INT32.unpack_from(buf, 0)
        pos = 4
        if api_key != API_VERSIONS_KEY and is_flexible(cls, api_version):
            pos = pos + 1 if buf[pos] == 0 else skip_tags(buf, pos, "ResponseHeader")
    except _DECODE_ERRORS as e:
        raise KafkaProtocolError(f"malformed response header: {e}") from None
    return correlation_id, decode_body(cls, api_version, buf, pos)
