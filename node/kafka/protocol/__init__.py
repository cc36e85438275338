"""Kafka's binary protocol, sans-I/O, generated from Apache Kafka's message definitions.

- ``messages``: the generated request/response classes (``ProduceRequest``,
  ``FetchResponse.PartitionData``, ...) with one encoder and decoder per version;
  ``generate`` rewrites it from ``schema/*.json``.
- ``decode_request`` / ``encode_response``: the broker's side; ``encode_request`` /
  ``decode_response``: the client's side. ``FrameDecoder``: size-prefixed frames.
- ``KafkaProtocolError`` is the only exception malformed input raises;
  ``UnsupportedVersion`` (a subclass) carries the request's api key, version and
  correlation id so that the broker can still answer.
"""

from .framing import FrameDecoder
from .primitives import KafkaProtocolError, UnsupportedVersion

_FROM_CODEC = ("API_NAMES", "VALID_VERSIONS", "RequestHeader", "decode_request",
               "decode_response", "encode_request", "encode_response", "request_class",
               "response_class")


def __getattr__(name: str):
    # The codec (and the generated messages under it) loads on first use, so that the
    # generator can run, and rewrite messages.py, even when the checked-in one is broken.
    if name in _FROM_CODEC:
        from . import codec
        return getattr(codec, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "KafkaProtocolError", "UnsupportedVersion", "RequestHeader", "decode_request",
    "encode_response", "encode_request", "decode_response", "FrameDecoder", "VALID_VERSIONS",
    "request_class", "response_class", "API_NAMES",
]
