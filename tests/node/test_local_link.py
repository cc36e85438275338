"""Local links (node.local_link): the framing as a pure codec, then real sockets."""
from __future__ import annotations

import random
import socket
import uuid

import pytest
from hypothesis import given, settings, strategies as st

from node import local_link
from node.net import Channel, ChannelError
from node.wire import protocol


def _wire(frames) -> bytes:
    return b"".join(bytes(b) for b in local_link.encode(frames))


@given(st.lists(st.lists(st.binary(max_size=300), min_size=1, max_size=6), max_size=8),
       st.integers(min_value=1, max_value=64), st.randoms())
@settings(max_examples=200, deadline=None)
def test_any_split_of_the_stream_gives_back_the_same_messages(messages, chunk, rnd):
    data = b"".join(_wire(m) for m in messages)
    decoder, out, position = local_link.Decoder(), [], 0
    while position < len(data):
        step = rnd.randint(1, chunk)
        out.extend(decoder.feed(data[position:position + step]))
        position += step
    assert [[bytes(f) for f in m] for m in out] == messages
    assert not decoder.buffer


def test_a_large_message_is_received_in_place_after_its_header():
    big = bytes(range(256)) * 1024                       # 256 KiB > DIRECT_BYTES
    data = _wire([b"head", big]) + _wire([b"next"])
    decoder = local_link.Decoder()
    assert decoder.feed(data[:1000]) == []               # header + a first part
    target = decoder.direct_target()
    rest = data[1000:len(data) - len(_wire([b"next"]))]
    assert len(target) == len(rest)
    target[:len(rest) - 10] = rest[:-10]
    assert decoder.direct_filled(len(rest) - 10) is None
    decoder.direct_target()[:10] = rest[-10:]
    frames = decoder.direct_filled(10)
    assert [bytes(f) for f in frames] == [b"head", big]
    assert decoder.direct_target() is None
    assert [[bytes(f) for f in m] for m in decoder.feed(_wire([b"next"]))] == [[b"next"]]


def test_frames_are_writable_copies():
    decoder = local_link.Decoder()
    [frames] = decoder.feed(_wire([b"head", b"batch"]))
    frames[1][0] = ord("B")       # the leader stamps a produce frame in place
    assert bytes(frames[1]) == b"Batch"


@pytest.mark.parametrize("garbage, reason", [
    (b"\x00\x00\x00\x00", "0 frames"),
    ((local_link.FRAMES_MAX + 1).to_bytes(4, "little"), "frames"),
    ((1).to_bytes(4, "little") + (local_link.MESSAGE_BYTES_MAX).to_bytes(4, "little"), "exceeds"),
])
def test_a_garbled_stream_is_refused_not_buffered_forever(garbage, reason):
    with pytest.raises(local_link.LinkClosed, match=reason):
        local_link.Decoder().feed(garbage)


def test_too_many_frames_cannot_be_encoded():
    with pytest.raises(ValueError):
        local_link.encode([b""] * (local_link.FRAMES_MAX + 1))


def test_address_and_endpoint_parsing():
    assert local_link.address("127.0.0.1", 9092) == "\0minikafka:127.0.0.1:9092"
    assert local_link.tcp_host_port("tcp://127.0.0.1:9092") == ("127.0.0.1", 9092)
    assert local_link.tcp_host_port("ipc:///x") is None
    assert local_link.tcp_host_port("tcp://127.0.0.1:http") is None


def _port() -> int:
    # A port nobody listens on: the name is all that matters here.
    return random.randint(20_000, 60_000) + uuid.uuid4().int % 1000


def test_a_channel_falls_back_to_zeromq_when_no_local_link_answers():
    channel = local_link.open_channel(f"tcp://127.0.0.1:{_port()}")
    try:
        assert isinstance(channel, Channel)
    finally:
        channel.close()


def test_request_response_over_a_real_socket_pair_and_end_of_stream():
    port = _port()
    listener = local_link.listen("127.0.0.1", port)
    assert listener is not None
    assert local_link.listen("127.0.0.1", port) is None        # the name is taken
    channel = local_link.open_channel(f"tcp://127.0.0.1:{port}", client_id="t")
    try:
        assert isinstance(channel, local_link.LocalChannel)
        sock, _ = listener.accept()
        server = local_link.LocalConnection(sock)
        big = bytes(range(256)) * 40_000             # 10 MB: many partial writes
        cid = channel.send(protocol.ApiKey.PRODUCE, {"acks": 1}, [big])
        received = []
        while not received:
            channel.flush()
            received = server.receive()
        request = protocol.decode_request(received[0])
        assert request.correlation_id == cid and bytes(request.frames[0]) == big
        server.send_frames(protocol.encode_response(cid, protocol.ApiKey.PRODUCE, {"ok": True}))
        server.flush()
        got = []
        while not got:
            got = channel.receive_ready()
        assert got[0].correlation_id == cid and got[0].body == {"ok": True}
        # The peer goes away: the blocking call fails at once, not after its timeout.
        server.close()
        with pytest.raises(ChannelError):
            channel.request(protocol.ApiKey.METADATA, {"topics": None}, timeout_ms=10_000)
    finally:
        channel.close()
        listener.close()


def test_received_messages_outlive_the_reads_that_follow():
    """Every read of a thread goes through one scratch buffer: what a receive returned
    (kept by a handler: a parked produce, a request being verified) must not change when
    the next read, on this stream or another, reuses it."""
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(2)]
    streams = [local_link.LocalConnection(a) for a, _ in pairs]
    try:
        kept = []
        for i in range(6):
            frames = [bytes([i]) * 300, bytes([100 + i]) * 5000]
            pairs[i % 2][1].sendall(b"".join(local_link.encode(frames)))
            got = []
            while not got:
                got = streams[i % 2].receive()
            assert [bytes(f) for f in got[0]] == frames
            kept.append((frames, got[0]))
        for frames, got in kept:
            assert [bytes(f) for f in got] == frames
    finally:
        for stream in streams:
            stream.close()
        for _, b in pairs:
            b.close()


def test_a_peer_that_does_not_read_is_cut_off(monkeypatch):
    monkeypatch.setattr(local_link, "OUTPUT_BYTES_MAX", 1 << 20)
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stream = local_link.LocalConnection(a)
    try:
        with pytest.raises(local_link.LinkClosed, match="does not read"):
            for _ in range(10_000):
                stream.send_frames([b"x" * 65536])
        assert stream.broken
    finally:
        stream.close()
        b.close()


def test_both_channels_are_request_channels():
    """``node.net.RequestChannel`` is the one interface: ZeroMQ's ``Channel`` and the local
    link's ``LocalChannel`` offer each of its methods with its parameters, and a real
    channel of each kind has each of its attributes."""
    import inspect

    from node.net import RequestChannel

    methods = [name for name, value in vars(RequestChannel).items()
               if inspect.isfunction(value) and not name.startswith("_")]
    assert {"send", "forget", "receive_ready", "request", "close"} <= set(methods)
    for cls in (Channel, local_link.LocalChannel):
        for name in methods:
            assert (inspect.signature(getattr(cls, name))
                    == inspect.signature(getattr(RequestChannel, name))), (cls, name)
    ours, theirs = socket.socketpair()
    channels = [Channel("tcp://127.0.0.1:1", client_id="c"),
                local_link.LocalChannel("tcp://127.0.0.1:1", ours, client_id="c")]
    try:
        for channel in channels:
            missing = [a for a in RequestChannel.__annotations__ if not hasattr(channel, a)]
            assert not missing, (type(channel), missing)
    finally:
        for channel in channels:
            channel.close()
        theirs.close()
