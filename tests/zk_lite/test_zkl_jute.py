"""The jute codec: every record whole, cut at every byte, with trailing garbage, fuzzed."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from zk_lite import jute

ACL = [(31, "world", "anyone"), (1, "digest", "bob:abc=")]
STAT = jute.Stat(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)

REQUESTS = [
    (1, jute.CreateRequest("/a", b"x", ACL, 0)),
    (1, jute.CreateRequest("/a", None, ACL, 3)),
    (15, jute.CreateRequest("/é", b"", ACL, 2)),
    (21, jute.CreateTTLRequest("/t", b"v", ACL, 5, 1000)),
    (2, jute.DeleteRequest("/a", -1)),
    (3, jute.ExistsRequest("/a", True)),
    (4, jute.GetDataRequest("/a", False)),
    (5, jute.SetDataRequest("/a", b"\x00\xff", 7)),
    (6, jute.GetACLRequest("/a")),
    (7, jute.SetACLRequest("/a", ACL, -1)),
    (8, jute.GetChildrenRequest("/", True)),
    (9, jute.SyncRequest("/")),
    (12, jute.GetChildren2Request("/x", False)),
    (13, jute.CheckVersionRequest("/a", 3)),
    (16, jute.ReconfigRequest(None, None, "server.1=x", -1)),
    (17, jute.CheckWatchesRequest("/a", 3)),
    (18, jute.RemoveWatchesRequest("/a", 1)),
    (100, jute.AuthPacket(0, "digest", b"user:pw")),
    (101, jute.SetWatches(5, ["/a"], ["/b", "/c"], [])),
    (105, jute.SetWatches2(5, ["/a"], [], ["/c"], ["/p"], ["/r"])),
    (102, jute.GetSASLRequest(b"tok")),
    (103, jute.GetEphemeralsRequest("/")),
    (104, jute.GetAllChildrenNumberRequest("/a")),
    (106, jute.AddWatchRequest("/a", 1)),
    (14, [(1, jute.CreateRequest("/m", b"", ACL, 0)), (13, jute.CheckVersionRequest("/m", 0)),
          (5, jute.SetDataRequest("/m", b"q", -1)), (2, jute.DeleteRequest("/m", -1))]),
    (14, []),
    (22, [(4, jute.GetDataRequest("/a", False)), (8, jute.GetChildrenRequest("/", False))]),
]


def _body(opcode, record):
    frame = jute.encode_request(7, opcode, record)
    return frame[4 + 8:]


@pytest.mark.parametrize("opcode,record", REQUESTS, ids=[f"op{o}-{i}" for i, (o, _) in enumerate(REQUESTS)])
def test_request_round_trips_whole(opcode, record):
    frame = jute.encode_request(7, opcode, record)
    reader = jute.FrameReader()
    reader.feed(frame)
    payload = reader.next_frame()
    assert reader.next_frame() is None
    assert struct.unpack_from("!ii", payload) == (7, opcode)
    assert jute.decode_request(opcode, payload[8:]) == record


@pytest.mark.parametrize("opcode,record", REQUESTS, ids=[f"op{o}-{i}" for i, (o, _) in enumerate(REQUESTS)])
def test_request_cut_at_every_byte_raises_incomplete(opcode, record):
    body = _body(opcode, record)
    for cut in range(len(body)):
        with pytest.raises(jute.IncompleteError):
            jute.decode_request(opcode, body[:cut])


@pytest.mark.parametrize("opcode,record", REQUESTS, ids=[f"op{o}-{i}" for i, (o, _) in enumerate(REQUESTS)])
def test_request_with_trailing_garbage_decodes_the_record(opcode, record):
    body = _body(opcode, record)
    assert jute.decode_request(opcode, body + b"\xde\xad\xbe\xef" * 3) == record


def test_empty_string_null_string_and_null_buffer_decode_as_none():
    body = struct.pack("!i", -1) + struct.pack("!i", -1) + struct.pack("!i", -1) + struct.pack("!i", 0)
    assert jute.decode_request(1, body) == jute.CreateRequest(None, None, None, 0)


def test_negative_lengths_below_minus_one_are_protocol_errors():
    with pytest.raises(jute.ProtocolError):
        jute.decode_request(4, struct.pack("!i", -2) + b"\x00")
    with pytest.raises(jute.ProtocolError):
        jute.decode_request(101, struct.pack("!qi", 0, -5))


def test_huge_vector_count_is_incomplete_not_a_long_loop():
    with pytest.raises(jute.IncompleteError):
        jute.decode_request(101, struct.pack("!qi", 0, 2**31 - 1))


def test_unknown_opcode_and_bad_multi_op_are_protocol_errors():
    with pytest.raises(jute.ProtocolError):
        jute.decode_request(99, b"")
    with pytest.raises(jute.ProtocolError):
        jute.decode_request(14, struct.pack("!iBi", 7, 0, -1) + b"\x00" * 16)


RESPONSES = [
    jute.CreateResponse("/a0000000001"),
    jute.Create2Response("/a", STAT),
    jute.StatResponse(STAT),
    jute.GetDataResponse(None, STAT),
    jute.GetDataResponse(b"data", STAT),
    jute.GetACLResponse(ACL, STAT),
    jute.GetChildrenResponse(["a", "b"]),
    jute.GetChildren2Response([], STAT),
    jute.ErrorResponse(0),
    jute.WhoAmIResponse([("ip", "127.0.0.1"), ("digest", "bob")]),
    jute.WatcherEvent(4, 3, "/x"),
]


@pytest.mark.parametrize("record", RESPONSES, ids=lambda r: type(r).__name__)
def test_response_round_trip_cut_and_trailing(record):
    raw = jute.encode_record(record)
    assert jute.decode_record(type(record), raw) == record
    assert jute.decode_record(type(record), raw + b"junk") == record
    for cut in range(len(raw)):
        with pytest.raises(jute.IncompleteError):
            jute.decode_record(type(record), raw[:cut])


def test_connect_request_with_and_without_read_only_byte():
    req = jute.ConnectRequest(0, 5, 10000, 0, b"\0" * 16)
    frame = jute.encode_connect_request(req, False)
    assert len(frame) == 4 + 45
    assert jute.decode_connect_request(frame[4:]) == (req, False)
    old = jute.encode_connect_request(req, None)
    assert jute.decode_connect_request(old[4:]) == (req, None)
    for cut in range(44):
        with pytest.raises(jute.IncompleteError):
            jute.decode_connect_request(frame[4:4 + cut])


def test_connect_response_layout_matches_the_worked_example():
    frame = jute.encode_connect_response(10000, 0x1234, b"p" * 16, False)
    assert frame[:8] == bytes.fromhex("0000002500000000")
    assert len(frame) == 4 + 37
    resp, ro = jute.decode_connect_response(frame[4:])
    assert (resp.timeOut, resp.sessionId, resp.passwd, ro) == (10000, 0x1234, b"p" * 16, False)
    assert len(jute.encode_connect_response(0, 0, b"\0" * 16, None)) == 4 + 36


def test_reply_and_notification_frames_match_the_wire_examples():
    assert jute.reply_frame(5, 9, -101) == bytes.fromhex("00000010 00000005 0000000000000009 ffffff9b")
    ev = jute.notification_frame(3, "/a")
    assert ev == bytes.fromhex("0000001e ffffffff ffffffffffffffff 00000000 00000003 00000003 00000002") + b"/a"


def test_multi_response_failure_encoding_round_trips():
    results = [(-1, 0, None), (-1, -101, None), (-1, -2, None)]
    raw = jute.encode_multi_response(results)
    decoded = jute.decode_multi_response(raw)
    assert [(t, e, r.err) for t, e, r in decoded] == [(-1, 0, 0), (-1, -101, -101), (-1, -2, -2)]


# ---------------------------------------------------------------------- frames

def test_frame_reader_byte_by_byte_and_trailing_partial_frame():
    frames = [jute.encode_request(i, 4, jute.GetDataRequest(f"/n{i}", False)) for i in range(5)]
    stream = b"".join(frames)
    reader = jute.FrameReader()
    got = []
    for i in range(len(stream)):
        reader.feed(stream[i:i + 1])
        while (payload := reader.next_frame()) is not None:
            got.append(payload)
    assert got == [f[4:] for f in frames]
    reader.feed(frames[0][:-1])  # trailing garbage: an incomplete frame stays buffered
    assert reader.next_frame() is None
    assert reader.buffered_bytes == len(frames[0]) - 1


@pytest.mark.parametrize("length", [-1, -(2**31), jute.MAX_BUFFER_BYTES + 1, 2**31 - 1])
def test_frame_reader_rejects_out_of_range_lengths(length):
    reader = jute.FrameReader()
    reader.feed(struct.pack("!i", length) + b"xx")
    with pytest.raises(jute.ProtocolError):
        reader.next_frame()


def test_frame_reader_accepts_exactly_the_cap():
    reader = jute.FrameReader(max_frame_bytes=10)
    reader.feed(struct.pack("!i", 10) + b"0123456789")
    assert reader.next_frame() == b"0123456789"


# ---------------------------------------------------------------------- fuzz

OPCODES = sorted(jute.REQUEST_RECORDS) + [14, 22]


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(OPCODES), st.binary(max_size=200))
def test_fuzz_any_bytes_decode_or_raise_protocol_error(opcode, data):
    try:
        jute.decode_request(opcode, data)
    except jute.ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_connect_and_frames_decode_or_raise_protocol_error(data):
    try:
        jute.decode_connect_request(data)
    except jute.ProtocolError:
        pass
    reader = jute.FrameReader(max_frame_bytes=64)
    reader.feed(data)
    try:
        while reader.next_frame() is not None:
            pass
    except jute.ProtocolError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(REQUESTS), st.data())
def test_fuzz_mutated_valid_requests_decode_or_raise_protocol_error(case, data):
    opcode, record = case
    body = bytearray(_body(opcode, record))
    if body:
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(0, len(body) - 1))
            body[i] = data.draw(st.integers(0, 255))
    try:
        jute.decode_request(opcode, bytes(body))
    except jute.ProtocolError:
        pass
