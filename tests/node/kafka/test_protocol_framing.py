"""FrameDecoder: size-prefixed frames, whole, split at every byte and coalesced."""

import pytest

from node.kafka.protocol import FrameDecoder, KafkaProtocolError

MAX_BYTES = 1000


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3]
STREAM = b"".join(frame(p) for p in PAYLOADS)


def test_coalesced_frames_come_out_whole_and_in_order():
    decoder = FrameDecoder(MAX_BYTES)
    assert [bytes(p) for p in decoder.feed(STREAM)] == PAYLOADS
    assert decoder.buffered_bytes == 0


def test_frames_split_at_every_byte_boundary():
    for cut in range(len(STREAM) + 1):
        decoder = FrameDecoder(MAX_BYTES)
        got = decoder.feed(STREAM[:cut]) + decoder.feed(STREAM[cut:])
        assert [bytes(p) for p in got] == PAYLOADS, cut
        assert decoder.buffered_bytes == 0


def test_frames_fed_one_byte_at_a_time():
    decoder = FrameDecoder(MAX_BYTES)
    got = []
    for i in range(len(STREAM)):
        got += decoder.feed(STREAM[i:i + 1])
    assert [bytes(p) for p in got] == PAYLOADS


def test_payloads_do_not_change_when_the_caller_reuses_its_buffer():
    decoder = FrameDecoder(MAX_BYTES)
    data = bytearray(frame(b"first") + frame(b"second")[:6])
    first, = decoder.feed(data)
    data[:] = b"X" * len(data)  # the caller reads the next bytes into the same buffer
    assert bytes(first) == b"first"
    second, = decoder.feed(frame(b"second")[6:])
    assert bytes(second) == b"second" and bytes(first) == b"first"


def test_a_frame_of_exactly_max_bytes_is_accepted_and_one_more_is_refused():
    largest = b"z" * MAX_BYTES
    assert [bytes(p) for p in FrameDecoder(MAX_BYTES).feed(frame(largest))] == [largest]
    decoder = FrameDecoder(MAX_BYTES)
    with pytest.raises(KafkaProtocolError, match="exceeds"):
        # Refused from its size alone, before the payload arrives.
        decoder.feed((MAX_BYTES + 1).to_bytes(4, "big"))


@pytest.mark.parametrize("size", [-1, -(1 << 31)])
def test_a_negative_size_is_refused(size):
    decoder = FrameDecoder(MAX_BYTES)
    decoder.feed(frame(b"ok")[:3])
    with pytest.raises(KafkaProtocolError, match="negative"):
        decoder.feed(frame(b"ok")[3:] + size.to_bytes(4, "big", signed=True))


def test_an_oversized_size_after_good_frames_is_refused():
    decoder = FrameDecoder(MAX_BYTES)
    with pytest.raises(KafkaProtocolError):
        decoder.feed(frame(b"ok") + b"\x7f\xff\xff\xff")
