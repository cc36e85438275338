"""Kafka's framing, sans-I/O: every request and response is a 4-byte big-endian size and
that many bytes. ``FrameDecoder`` turns a byte stream into whole payloads.

Rules: a size is checked as soon as its 4 bytes arrive (a negative size or one above
``max_bytes`` raises ``KafkaProtocolError`` before any of the frame is buffered), and the
decoder never holds more than one incomplete frame.
"""

from .primitives import S_INT32, KafkaProtocolError

SIZE_BYTES = 4


class FrameDecoder:
    """``feed(data)`` returns the complete payloads (size prefix stripped) that ``data``
    finishes, in order; the rest waits for the next ``feed``. Payloads are bytes-like
    (slices of ``data`` when it holds whole frames) and never change afterwards."""

    def __init__(self, max_bytes: int):
        assert max_bytes >= 0, max_bytes
        self.max_bytes = max_bytes
        self._buffer = bytearray()  # the start of an incomplete frame, at most one

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def _size(self, view, pos: int) -> int:
        size, = S_INT32.unpack_from(view, pos)
        if size < 0:
            raise KafkaProtocolError(f"negative frame size {size}")
        if size > self.max_bytes:
            raise KafkaProtocolError(f"frame of {size} bytes exceeds the limit of {self.max_bytes}")
        return size

    def feed(self, data) -> list:
        if self._buffer:
            self._buffer += data
            view = self._buffer
        else:
            # Nothing pending: cut payloads straight out of the caller's bytes, no copy.
            view = memoryview(data if type(data) is bytes else bytes(data))
        frames = []
        pos = 0
        end = len(view)
        while end - pos >= SIZE_BYTES:
            size = self._size(view, pos)
            if end - pos - SIZE_BYTES < size:
                break
            start = pos + SIZE_BYTES
            pos = start + size
            frames.append(bytes(view[start:pos]) if view is self._buffer else view[start:pos])
        if view is self._buffer:
            del self._buffer[:pos]
        else:
            self._buffer += view[pos:]
        assert len(self._buffer) < SIZE_BYTES or \
            len(self._buffer) < SIZE_BYTES + self._size(self._buffer, 0)
        return frames
