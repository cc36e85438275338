"""Bad input against a live Kafka listener (a real 1-broker cluster).

A hypothesis-driven fuzzer sends random and mutated frames: valid requests of every
advertised API built with the codec and then mutated (bytes flipped, cut, spliced,
integers overwritten), sizes that lie, frames over ``socket.request.max.bytes``,
negative sizes, unknown API keys and versions, garbage, several frames at once. After
each: the broker process is alive, a new connection gets a correct Metadata answer, and
the test topic's log end moved only by what valid Produce requests (judged here, by
this file's own batch reader, ``raw.valid_batches_count``) could have appended - by
exactly their records when they were sent unmutated. A first frame the codec cannot
parse, or that is too large, must make the broker close the connection.

Then the rules one by one: too large a frame, an unknown API key, ApiVersions too new,
a corrupt batch, magic 1, pipelined requests.
"""
from __future__ import annotations

import collections
import struct
import time
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from node.kafka.listener import VIOLATION_LOG_INTERVAL_S
from node.kafka.protocol import (KafkaProtocolError, UnsupportedVersion, decode_request,
                                 decode_response, request_class)
from node.kafka.protocol import messages as m
from tests.node.kafka import raw
from tests.node.kafka.clients import create_topic, kafka_bootstrap, running_cluster
from tests.waiting import poll_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

TOPIC = "fuzz"
MAX_REQUEST_BYTES = 100 * 1024        # the broker's socket.request.max.bytes here
EXAMPLES = 250                        # ~20-60 s on a loaded 2-core machine
QUIET_S = 0.15                        # no more bytes for this long: the broker is done
CLOSE_WAIT_S = 10.0                   # a bad frame's connection is closed within this
APPEND_WAIT_S = 3.0
API_VERSIONS, PRODUCE, METADATA = 18, 0, 3


@dataclass
class Target:
    cluster: object
    address: str
    versions: dict
    topic_id: object
    bases: list = field(default_factory=list)    # (api key, version, payload, records)
    end: int = 0                                  # the fuzz topic's log end offset

    def alive(self) -> bool:
        return self.cluster.process(0).pid() is not None

    def log_end(self) -> int:
        return raw.latest_offset(self.address, self.versions[2][1], TOPIC)


def _bases(target: Target) -> list:
    """Valid request payloads (no size prefix): every advertised API at its lowest and
    highest version (default-built where nothing else makes sense), and the data path's
    requests filled in, at every version."""
    out = []

    def add(key, version, request, records=0):
        out.append((key, version, raw.frame(key, version, request)[4:], records))

    for key, (low, high) in sorted(target.versions.items()):
        for version in sorted({low, high}):
            try:
                add(key, version, request_class(key)())
            except KafkaProtocolError:
                pass   # a default object that cannot be encoded (a required field)
    batch = raw.record_batch([b"fuzz-one", b"fuzz-two"], key=b"k")
    for version in range(target.versions[PRODUCE][0], target.versions[PRODUCE][1] + 1):
        add(PRODUCE, version, raw.produce_request(TOPIC, batch), 2)
    low, high = target.versions[1]
    for version in range(low, high + 1):
        add(1, version, raw.fetch_request(TOPIC, topic_id=target.topic_id if version >= 13
                                          else None))
    for version in range(target.versions[METADATA][0], target.versions[METADATA][1] + 1):
        add(METADATA, version, m.MetadataRequest(topics=[
            m.MetadataRequest.MetadataRequestTopic(name=TOPIC)]))
    return out


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    with running_cluster(tmp_path_factory.mktemp("fuzz"), brokers=1,
                         config={"socket.request.max.bytes": str(MAX_REQUEST_BYTES)}) as cluster:
        create_topic(cluster, TOPIC, replication_factor=1)
        address = kafka_bootstrap(cluster)
        versions = raw.api_versions(address)
        assert {PRODUCE, 1, 2, METADATA, API_VERSIONS} <= set(versions), versions
        md = raw.metadata(address, versions[METADATA][1], [TOPIC])
        t = Target(cluster, address, versions, getattr(md.topics[0], "topic_id", None))
        t.bases = _bases(t)
        t.end = t.log_end()
        yield t


# ------------------------------------------------------------------ what may happen
def _frames_in(data: bytes) -> list[bytes]:
    """The complete frames in ``data`` as the broker would cut them (up to a bad size)."""
    out, pos = [], 0
    while len(data) - pos >= 4:
        size, = struct.unpack_from(">i", data, pos)
        if size < 0 or size > MAX_REQUEST_BYTES or pos + 4 + size > len(data):
            break
        out.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return out


def _appendable(payload: bytes) -> int:
    """Records a Produce payload could add to the fuzz topic (0 if it is not one the
    broker may accept: it does not parse, or its batches are not valid)."""
    try:
        header, request = decode_request(payload)
    except KafkaProtocolError:
        return 0
    if header.api_key != PRODUCE or request.acks not in (-1, 0, 1):
        return 0
    total = 0
    for topic in request.topic_data:
        for p in topic.partition_data:
            if topic.name == TOPIC and p.index == 0:
                total += raw.valid_batches_count(p.records) or 0
    return total


def _must_close(data: bytes) -> bool:
    """The first frame is too large, negative, or does not parse (an ApiVersions too new
    is answered instead, and an incomplete frame is waited for)."""
    if len(data) < 4:
        return False
    size, = struct.unpack_from(">i", data, 0)
    if size < 0 or size > MAX_REQUEST_BYTES:
        return True
    if len(data) < 4 + size:
        return False
    try:
        decode_request(data[4:4 + size])
    except UnsupportedVersion as e:
        return e.api_key != API_VERSIONS
    except KafkaProtocolError:
        return True
    return False


def _check_after(target: Target, data: bytes, closed: bool, exact: bool) -> None:
    assert target.alive(), "the broker died"
    if _must_close(data):
        assert closed, f"the broker kept a connection open after a bad first frame: {data[:64]!r}"
    md = raw.metadata(target.address, target.versions[METADATA][1], [TOPIC])
    host, port = target.address.rsplit(":", 1)
    assert [(b.node_id, b.host, b.port) for b in md.brokers] == [(0, host, int(port))]
    topic = md.topics[0]
    assert (topic.name, topic.error_code) == (TOPIC, 0)
    assert [(p.partition_index, p.leader_id) for p in topic.partitions] == [(0, 0)]
    allowed = sum(_appendable(f) for f in _frames_in(data))
    if exact:
        assert target.log_end() == target.end + allowed, "a valid produce was not appended once"
    elif allowed:   # maybe appended (acks=0 answers nothing): give it time to land
        try:
            poll_until(lambda: target.log_end() == target.end + allowed, APPEND_WAIT_S, "")
        except AssertionError:
            pass
    end = target.log_end()
    assert target.end <= end <= target.end + allowed, \
        f"the log end moved from {target.end} to {end}; valid produce records sent: {allowed}"
    target.end = end


def _send(target: Target, data: bytes) -> bool:
    """Send ``data`` on a new connection and read until the broker closes it (True) or
    is quiet."""
    with raw.connect(target.address) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return True    # closed while we were still sending: a bad frame's fate
        if _must_close(data):
            return raw.drain(sock, CLOSE_WAIT_S, CLOSE_WAIT_S)[1]
        return raw.drain(sock, QUIET_S, 2.0)[1]


# ------------------------------------------------------------------ the strategies
def _size(n: int) -> bytes:
    return struct.pack(">i", n)


def mutated(draw, payload: bytes) -> bytes:
    data = bytearray(payload)
    for _ in range(draw(st.integers(1, 3))):
        how = draw(st.sampled_from(["flip", "cut", "extend", "splice", "int"]))
        i = draw(st.integers(0, max(0, len(data) - 1)))
        if how == "flip" and data:
            data[i] ^= draw(st.integers(1, 255))
        elif how == "cut":
            del data[i:]
        elif how == "extend":
            data += draw(st.binary(min_size=1, max_size=64))
        elif how == "splice":
            j = draw(st.integers(i, min(len(data), i + 16)))
            data[i:j] = draw(st.binary(max_size=16))
        elif how == "int" and len(data) >= i + 4:
            value = draw(st.sampled_from([0, -1, 1, 0x7FFF, -0x8000, 0x7FFFFFFF, -0x80000000,
                                          MAX_REQUEST_BYTES + 1]))
            fmt = draw(st.sampled_from([">h", ">i"]))
            struct.pack_into(fmt, data, i, max(-0x8000, min(0x7FFF, value))
                             if fmt == ">h" else value)
    return bytes(data)


@st.composite
def cases(draw, bases) -> tuple[bytes, bool, str]:
    """(bytes to send, whether the log end must move by exactly the valid records, kind)."""
    key, version, payload, _ = draw(st.sampled_from(bases))
    kind = draw(st.sampled_from(["valid", "mutated", "mutated", "mutated", "lying size",
                                 "too large", "negative", "unknown api", "unknown version",
                                 "garbage", "several"]))
    if kind == "valid":
        return _size(len(payload)) + payload, True, kind
    if kind == "mutated":
        body = mutated(draw, payload)
        return _size(len(body)) + body, False, kind
    if kind == "lying size":
        delta = draw(st.integers(-8, 8).filter(bool))
        return _size(max(0, len(payload) + delta)) + payload, False, kind
    if kind == "too large":
        size = draw(st.integers(MAX_REQUEST_BYTES + 1, 2**31 - 1))
        return _size(size) + payload[:draw(st.integers(0, len(payload)))], False, kind
    if kind == "negative":
        return _size(draw(st.integers(-2**31, -1))) + payload, False, kind
    if kind == "unknown api":
        unknown = draw(st.integers(-2**15, 2**15 - 1).filter(lambda k: k not in m.REQUESTS))
        body = struct.pack(">h", unknown) + payload[2:]
        return _size(len(body)) + body, False, kind
    if kind == "unknown version":
        low, high = request_class(key).VALID_VERSIONS
        bad = draw(st.one_of(st.integers(high + 1, 2**15 - 1), st.integers(-2**15, low - 1)))
        body = payload[:2] + struct.pack(">h", bad) + payload[4:]
        return _size(len(body)) + body, False, kind
    if kind == "garbage":
        return draw(st.binary(min_size=1, max_size=300)), False, kind
    # Several frames at once: valid ones, then a mutated one, then a valid one.
    _, _, other, _ = draw(st.sampled_from(bases))
    bad = mutated(draw, other)
    return (_size(len(payload)) + payload + _size(len(bad)) + bad
            + _size(len(payload)) + payload), False, kind


def test_fuzzed_frames_never_hurt_the_broker_or_reach_the_log(target):
    sent = collections.Counter()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=cases(target.bases))
    def fuzz(case):
        data, exact, kind = case
        event(kind)
        sent[kind] += 1
        closed = _send(target, data)
        _check_after(target, data, closed, exact)

    fuzz()
    print(f"fuzzed the Kafka listener with {sum(sent.values())} cases: {dict(sent)}")
    # A translation that fails on client input is a bug of ours (logged with "failed").
    failures = [line for line in _broker_log(target).splitlines() if " failed; closing" in line]
    assert not failures, failures[:5]
    assert sum(sent.values()) >= EXAMPLES and len(sent) >= 8, sent


# ------------------------------------------------------------------ the rules one by one
def _broker_log(target: Target) -> str:
    return target.cluster.process(0).log_path.read_text(errors="replace")


def _closing_lines(target: Target) -> list[str]:
    return [line for line in _broker_log(target).splitlines()
            if "closing the connection from" in line]


def _send_too_large(target: Target) -> str:
    """One connection that sends a frame over the limit; the broker closes it at once,
    answering nothing. Returns the peer as the broker names it."""
    with raw.connect(target.address) as sock:
        host, port = sock.getsockname()[:2]
        sock.sendall(_size(MAX_REQUEST_BYTES + 1) + b"\x00" * 1000)
        got, closed = raw.drain(sock, CLOSE_WAIT_S, CLOSE_WAIT_S)
    assert closed and got == b"", got
    return f"{host}:{port}"


def test_too_large_a_frame_closes_the_connection_with_a_rate_limited_log_line(target):
    # Lines are limited to one per VIOLATION_LOG_INTERVAL_S for all bad peers: keep
    # sending until one line names one of ours (the fuzzer may have just had its line).
    peers: list[str] = []

    def logged() -> list[str]:
        peers.append(_send_too_large(target))
        return [line for line in _closing_lines(target) if any(p in line for p in peers)]

    lines = poll_until(logged, 30, "a log line naming a peer that sent too much",
                       interval_s=0.2)
    assert len(lines) == 1 and str(MAX_REQUEST_BYTES) in lines[0], lines
    # A flood of bad connections costs about one line per interval, not one each.
    before = len(_closing_lines(target))
    started = time.monotonic()
    for _ in range(30):
        _send_too_large(target)
    elapsed = time.monotonic() - started
    added = len(_closing_lines(target)) - before
    assert added <= 2 + elapsed / VIOLATION_LOG_INTERVAL_S, (added, elapsed)
    _check_after(target, b"", True, True)


def test_unknown_api_key_closes_the_connection(target):
    body = raw.frame(API_VERSIONS, 0, m.ApiVersionsRequest())[4:]
    body = struct.pack(">h", 9999) + body[2:]
    with raw.connect(target.address) as sock:
        sock.sendall(_size(len(body)) + body)
        got, closed = raw.drain(sock, CLOSE_WAIT_S, CLOSE_WAIT_S)
    assert closed and got == b"", got


def test_api_versions_too_new_is_answered_in_v0_with_the_api_list(target):
    body = raw.frame(API_VERSIONS, 3, m.ApiVersionsRequest(client_software_name="fuzz",
                                                             client_software_version="1"))[4:]
    body = body[:2] + struct.pack(">h", 999) + body[4:]
    with raw.connect(target.address) as sock:
        sock.sendall(_size(len(body)) + body)
        payload = raw.read_frame(sock)
    assert payload is not None
    correlation, answer = decode_response(API_VERSIONS, 0, payload)
    assert correlation == struct.unpack_from(">i", body, 4)[0]
    assert answer.error_code == 35   # UNSUPPORTED_VERSION
    assert {a.api_key for a in answer.api_keys} == set(target.versions)


def _produce(target: Target, records: bytes):
    version = target.versions[PRODUCE][1]
    answer = raw.call(target.address, PRODUCE, version, raw.produce_request(TOPIC, records))
    return answer.responses[0].partition_responses[0]


def test_a_corrupt_batch_is_refused_and_a_valid_one_appended(target):
    target.end = target.log_end()
    good = raw.record_batch([b"a", b"b", b"c"])
    bad = bytearray(good)
    bad[-1] ^= 0xFF     # the CRC no longer matches
    assert _produce(target, bytes(bad)).error_code == 2     # CORRUPT_MESSAGE
    assert target.log_end() == target.end
    answer = _produce(target, good)
    assert (answer.error_code, answer.base_offset) == (0, target.end)
    assert target.log_end() == target.end + 3
    target.end += 3


def test_magic_1_is_unsupported_for_message_format(target):
    target.end = target.log_end()
    old = raw.record_batch([b"old"], magic=1)
    assert _produce(target, old).error_code in (43, 2)   # UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert target.log_end() == target.end


def test_pipelined_requests_are_answered_in_order(target):
    version = target.versions[METADATA][1]
    frames = [raw.frame(METADATA, version, m.MetadataRequest(topics=None)) for _ in range(5)]
    frames.insert(2, raw.frame(API_VERSIONS, 0, m.ApiVersionsRequest()))
    with raw.connect(target.address) as sock:
        sock.sendall(b"".join(frames))
        answers = [raw.read_frame(sock) for _ in frames]
    assert all(a is not None for a in answers)
    sent = [struct.unpack_from(">i", f, 8)[0] for f in frames]
    assert [struct.unpack_from(">i", a, 0)[0] for a in answers] == sent
    assert isinstance(decode_response(API_VERSIONS, 0, answers[2])[1], m.ApiVersionsResponse)
