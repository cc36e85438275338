"""Kafka's "consumer" embedded protocol: the bytes a classic group carries opaquely in
JoinGroup (a member's Subscription) and SyncGroup (a member's Assignment), as
Kafka's ConsumerProtocolSubscription / ConsumerProtocolAssignment messages define them
(big-endian, non-flexible): a version, then the fields. Sans-I/O.

We write version 0 (topics, no user data; assignments likewise) and read any version:
the fields later versions add come after the ones read here, so they are skipped.
A malformed buffer raises ``ConsumerProtocolError``.
"""
from __future__ import annotations

import struct

BYTES_MAX = 1 << 20             # the largest subscription or assignment read
NULL_LENGTH = -1


class ConsumerProtocolError(ValueError):
    """Bytes that are not a consumer-protocol Subscription or Assignment."""


def _string(text: str) -> bytes:
    raw = text.encode()
    assert len(raw) <= 0x7FFF, text
    return struct.pack(">h", len(raw)) + raw


def encode_subscription(topics) -> bytes:
    names = sorted(set(topics))
    return struct.pack(">hi", 0, len(names)) + b"".join(_string(t) for t in names) + \
        struct.pack(">i", NULL_LENGTH)


def encode_assignment(partitions) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(int(partition))
    out = [struct.pack(">hi", 0, len(by_topic))]
    for topic, ps in by_topic.items():
        out.append(_string(topic) + struct.pack(f">i{len(ps)}i", len(ps), *ps))
    out.append(struct.pack(">i", NULL_LENGTH))
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes):
        if len(data) > BYTES_MAX:
            raise ConsumerProtocolError(f"{len(data)} bytes: more than {BYTES_MAX}")
        self.data = data
        self.pos = 0

    def take(self, fmt: str):
        try:
            values = struct.unpack_from(fmt, self.data, self.pos)
        except struct.error:
            raise ConsumerProtocolError(f"cut short at byte {self.pos}") from None
        self.pos += struct.calcsize(fmt)
        return values

    def count(self) -> int:
        (n,) = self.take(">i")
        if n < NULL_LENGTH or n > len(self.data):
            raise ConsumerProtocolError(f"bad array length {n} at byte {self.pos - 4}")
        return max(0, n)

    def string(self) -> str:
        (n,) = self.take(">h")
        if n < 0 or self.pos + n > len(self.data):
            raise ConsumerProtocolError(f"bad string length {n} at byte {self.pos - 2}")
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise ConsumerProtocolError("a name that is not UTF-8") from None


def decode_subscription(data) -> list[str]:
    """The subscribed topics of a Subscription (any version)."""
    reader = _Reader(bytes(data or b""))
    reader.take(">h")
    return [reader.string() for _ in range(reader.count())]


def decode_assignment(data) -> list[tuple[str, int]]:
    """The (topic, partition) pairs of an Assignment (any version); empty bytes are
    the empty assignment (a member the leader gave nothing)."""
    data = bytes(data or b"")
    if not data:
        return []
    reader = _Reader(data)
    reader.take(">h")
    out = []
    for _ in range(reader.count()):
        topic = reader.string()
        n = reader.count()
        out += [(topic, p) for p in reader.take(f">{n}i")]
    return out
