"""node/wire/protocol.py and node/wire/control.py tested the way h11 tests its parser:
every message whole, cut at every byte, with trailing garbage, and fuzzed. Malformed
input only ever raises the protocol's own error (ProtocolError), never anything else."""
from __future__ import annotations

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from node.wire import protocol
from node.wire.control import (REPLICAS_MAX, LeaderAndIsrPartition, StopReplicaPartition,
                               UpdateMetadataPartition)

BATCH = b"\x00" * 61 + b"records"

# One request of every API, with bodies as the clients and the controller send them.
REQUESTS = [
    (protocol.ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 30000, "partitions": [["t", 0]]},
     [BATCH]),
    (protocol.ApiKey.FETCH, {"replica_id": -1, "max_wait_ms": 500, "min_bytes": 1,
                             "max_bytes": 1 << 20,
                             "partitions": [["t", 0, 42, 3, 1 << 20], ["u", 1, 0, -1, 1024]]}, []),
    (protocol.ApiKey.LIST_OFFSETS, {"replica_id": -1, "partitions": [["t", 0, -1]]}, []),
    (protocol.ApiKey.METADATA, {"topics": None}, []),
    (protocol.ApiKey.LEADER_AND_ISR, {"controller_id": 1, "controller_epoch": 7, "partitions": [
        LeaderAndIsrPartition("t", 0, 1, 5, (1, 2), 9, (1, 2, 3), True).to_wire()],
        "live_leaders": [[1, "127.0.0.1", 9092]]}, []),
    (protocol.ApiKey.STOP_REPLICA, {"controller_id": 1, "controller_epoch": 7,
                                    "delete_partitions": True,
                                    "partitions": [StopReplicaPartition("t", 0).to_wire()]}, []),
    (protocol.ApiKey.UPDATE_METADATA, {"controller_id": 1, "controller_epoch": 7,
                                       "brokers": [[1, "127.0.0.1", 9092, None]], "partitions": [
        UpdateMetadataPartition("t", 0, 1, 5, (1,), 9, (1, 2), (2,)).to_wire()]}, []),
    (protocol.ApiKey.CONTROLLED_SHUTDOWN, {"broker_id": 2, "broker_epoch": 77}, []),
    (protocol.ApiKey.CREATE_TOPICS, {"topics": [["t", 3, 3, None, {"retention.ms": "1000"}]],
                                     "timeout_ms": 5000, "validate_only": False}, []),
    (protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH, {"replica_id": 2, "partitions": [["t", 0, 3]]}, []),
    (protocol.ApiKey.ELECT_LEADERS, {"election_type": 0, "partitions": None}, []),
]
RESPONSES = [
    (7, protocol.ApiKey.PRODUCE, {"partitions": [["t", 0, 0, 100, -1, 0]]}, []),
    (8, protocol.ApiKey.FETCH, {"partitions": [["t", 0, 0, 120, 120, 0]]}, [BATCH, BATCH]),
    (9, protocol.ApiKey.METADATA, {"brokers": [[1, "127.0.0.1", 9092, None]], "controller_id": 1,
                                   "topics": [["t", 0, [[0, 0, 1, 5, [1, 2], [1, 2], []]]]]}, []),
]


def _bytes(frames) -> list[bytes]:
    return [bytes(f) for f in frames]


@pytest.mark.parametrize("api_key,body,batches", REQUESTS, ids=lambda x: getattr(x, "name", ""))
def test_every_request_whole(api_key, body, batches):
    frames = protocol.encode_request(api_key, 12345, "client-1", body, batches)
    request = protocol.decode_request(_bytes(frames))
    assert (request.api_key, request.api_version, request.correlation_id, request.client_id) \
        == (api_key, protocol.API_VERSION, 12345, "client-1")
    assert request.body == body
    assert [bytes(f) for f in request.frames] == batches
    assert protocol.peek_correlation_id(frames) == 12345
    assert protocol.peek_api_key(frames) == api_key


def test_golden_frames_of_a_request_and_a_response():
    """The frames byte for byte, built by hand from the msgpack spec
    (https://github.com/msgpack/msgpack/blob/master/spec.md), beside the round trips:
    a codec that changes the format on both sides at once fails here."""
    frames = _bytes(protocol.encode_request(
        protocol.ApiKey.PRODUCE, 300, "mk",
        {"acks": -1, "timeout_ms": 1000, "partitions": [["t", 0]]}, [BATCH]))
    assert protocol.API_VERSION < 128   # a positive fixint: its own byte
    assert frames[0] == bytes([0x94,                         # fixarray of 4
                               0x00,                         # api_key 0 (PRODUCE)
                               protocol.API_VERSION,
                               0xcd, 0x01, 0x2c,             # uint16 300, big-endian
                               0xa2]) + b"mk"                # fixstr of 2
    assert frames[1] == (b"\x83"                             # fixmap of 3, in order
                         b"\xa4acks" b"\xff"                 # -1: negative fixint
                         b"\xaatimeout_ms" b"\xcd\x03\xe8"   # uint16 1000
                         b"\xaapartitions" b"\x91\x92\xa1t\x00")  # [["t", 0]]
    assert frames[2:] == [BATCH]                             # batches go as they are
    response = _bytes(protocol.encode_response(2**31 - 1, protocol.ApiKey.FETCH, {}, [b""]))
    assert response == [b"\x92\xce\x7f\xff\xff\xff\x01",     # [uint32 cid, api_key 1]
                        b"\x80", b""]                        # empty fixmap, empty frame


@pytest.mark.parametrize("cid,api_key,body,batches", RESPONSES, ids=lambda x: str(x)[:12])
def test_every_response_whole(cid, api_key, body, batches):
    response = protocol.decode_response(
        _bytes(protocol.encode_response(cid, api_key, body, batches)))
    assert (response.correlation_id, response.api_key, response.body) == (cid, api_key, body)
    assert [bytes(f) for f in response.frames] == batches


@pytest.mark.parametrize("api_key,body,batches", REQUESTS, ids=lambda x: getattr(x, "name", ""))
def test_every_request_cut_at_every_byte_is_a_protocol_error(api_key, body, batches):
    frames = _bytes(protocol.encode_request(api_key, 1, "c", body, batches))
    for which in (0, 1):  # the header and the body; batches are opaque here
        whole = frames[which]
        for cut in range(len(whole)):
            broken = list(frames)
            broken[which] = whole[:cut]
            with pytest.raises(protocol.ProtocolError):
                protocol.decode_request(broken)
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_request(frames[:1])


@pytest.mark.parametrize("cid,api_key,body,batches", RESPONSES, ids=lambda x: str(x)[:12])
def test_every_response_cut_at_every_byte_is_a_protocol_error(cid, api_key, body, batches):
    frames = _bytes(protocol.encode_response(cid, api_key, body, batches))
    for which in (0, 1):
        for cut in range(len(frames[which])):
            broken = list(frames)
            broken[which] = frames[which][:cut]
            with pytest.raises(protocol.ProtocolError):
                protocol.decode_response(broken)


@pytest.mark.parametrize("garbage", [b"\x00", b"\xc0", b"\x91\x01", b"junk", b"\xff" * 9])
def test_trailing_garbage_after_a_message_is_a_protocol_error(garbage):
    api_key, body, batches = REQUESTS[1]
    frames = _bytes(protocol.encode_request(api_key, 1, "c", body, batches))
    for which in (0, 1):
        broken = list(frames)
        broken[which] = frames[which] + garbage
        with pytest.raises(protocol.ProtocolError, match="not valid msgpack"):
            protocol.decode_request(broken)
    response = _bytes(protocol.encode_response(1, api_key, {"partitions": []}))
    with pytest.raises(protocol.ProtocolError):
        protocol.decode_response([response[0], response[1] + garbage])


@pytest.mark.parametrize("header,message", [
    ([0, 0, 1], "header must be"),
    ([0, 0, 1, "c", "extra"], "header must be"),
    (["0", 0, 1, "c"], "wrong types"),
    ([0, 0, 1.5, "c"], "wrong types"),
    ([0, 0, 1, b"c"], "wrong types"),
    ([0, 0, 1, "c" * (protocol.CLIENT_ID_CHARS_MAX + 1)], "client_id longer"),
    ({"api_key": 0}, "header must be"),
])
def test_a_bad_header_is_named(header, message):
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.decode_request([protocol.pack(header), protocol.pack({})])


def test_limits_are_enforced_before_decoding():
    header = protocol.pack([0, 0, 1, "c"])
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.decode_request([header, b"\x80" + b"\x00" * protocol.BODY_BYTES_MAX])
    with pytest.raises(protocol.ProtocolError, match="exceeds"):
        protocol.decode_request([b"\x90" * (protocol.HEADER_BYTES_MAX + 1), protocol.pack({})])
    with pytest.raises(protocol.ProtocolError, match="frames exceed"):
        protocol.decode_request(
            [header, protocol.pack({})] + [b""] * protocol.FRAMES_PER_MESSAGE_MAX)
    with pytest.raises(protocol.ProtocolError, match="body must be a map"):
        protocol.decode_request([header, protocol.pack([1, 2])])


# ------------------------------------------------------------------ fuzz

_leaf = st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | \
    st.text(max_size=20) | st.binary(max_size=20)
_values = st.recursive(_leaf, lambda inner: st.lists(inner, max_size=6) |
                       st.dictionaries(st.text(max_size=8) | st.integers(-2**63, 2**63 - 1),
                                       inner, max_size=6),
                       max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=5))
def test_random_bytes_only_ever_raise_protocol_error(frames):
    for decode in (protocol.decode_request, protocol.decode_response):
        try:
            decode(frames)
        except protocol.ProtocolError:
            pass
    assert protocol.peek_correlation_id(frames) is None or isinstance(
        protocol.peek_correlation_id(frames), int)
    assert protocol.peek_api_key(frames) is None or isinstance(protocol.peek_api_key(frames), int)


@settings(max_examples=400, deadline=None)
@given(_values, _values)
def test_random_msgpack_values_only_ever_raise_protocol_error(header, body):
    frames = [msgpack.packb(header, use_bin_type=True), msgpack.packb(body, use_bin_type=True)]
    try:
        request = protocol.decode_request(frames)
    except protocol.ProtocolError:
        return
    assert isinstance(request.body, dict) and isinstance(request.client_id, str)


@settings(max_examples=300, deadline=None)
@given(st.lists(_values, max_size=4), st.sampled_from(
    [LeaderAndIsrPartition, UpdateMetadataPartition, StopReplicaPartition]))
def test_random_controller_entries_only_ever_raise_protocol_error(raw, cls):
    try:
        entries = cls.list_from_wire(raw)
    except protocol.ProtocolError:
        return
    assert [e.to_wire() for e in entries] == raw  # what is accepted round-trips exactly


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=10), st.integers(0, 2**31 - 1), st.integers(-2, 100),
       st.integers(-1, 2**31 - 1),
       st.lists(st.integers(0, 1000), unique=True, max_size=REPLICAS_MAX),
       st.lists(st.integers(0, 1000), unique=True, max_size=REPLICAS_MAX), st.booleans())
def test_controller_entries_round_trip(topic, partition, leader, epoch, isr, replicas, new):
    for entry in (LeaderAndIsrPartition(topic, partition, leader, epoch, tuple(isr), 3,
                                        tuple(replicas), new),
                  LeaderAndIsrPartition(topic, partition, leader, epoch, tuple(isr), 3,
                                        tuple(replicas), new, tuple(replicas[:2]), int(new)),
                  UpdateMetadataPartition(topic, partition, leader, epoch, tuple(isr), 3,
                                          tuple(replicas), tuple(isr)),
                  StopReplicaPartition(topic, partition, epoch)):
        wire = msgpack.unpackb(protocol.pack(entry.to_wire()), raw=False)
        assert type(entry).from_wire(wire) == entry


@pytest.mark.parametrize("entry,message", [
    (["t", 0, 1, 0, [1], 0, [1]], "list of 8 fields"),
    ([1, 0, 1, 0, [1], 0, [1], False], "topic must be a string"),
    (["t", -1, 1, 0, [1], 0, [1], False], "partition -1 < 0"),
    (["t", 0, True, 0, [1], 0, [1], False], "leader must be an int"),
    (["t", 0, 1, 0, [1, 1], 0, [1], False], "isr must be a list of distinct"),
    (["t", 0, 1, 0, [1], 0, list(range(REPLICAS_MAX + 1)), False], "at most 16"),
    (["t", 0, 1, 0, [1], 0, [1], 1], "is_new must be a bool"),
])
def test_a_bad_leader_and_isr_entry_is_named(entry, message):
    with pytest.raises(protocol.ProtocolError, match=message):
        LeaderAndIsrPartition.from_wire(entry)


def test_a_too_deep_body_is_a_protocol_error_with_a_reason():
    import pytest as _pytest
    deep = b"\x91" * 200_000 + b"\x00"
    with _pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_request([protocol.pack([3, 0, 1, "c"]), deep])
    assert str(info.value) != "body is not valid msgpack: "
