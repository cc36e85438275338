"""A raw Kafka-protocol connection for tests: send any request object in any version
through the generated codec (``node.kafka.protocol``) and read the answer, or send raw
bytes to see what a listener does with them."""
from __future__ import annotations

import socket
import struct
import time

from node.kafka.protocol import (FrameDecoder, RequestHeader, decode_response,
                                 encode_request)

FRAME_BYTES_MAX = 64 * 1024 * 1024


class KafkaWire:
    def __init__(self, address: str, timeout_s: float = 10.0) -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.decoder = FrameDecoder(FRAME_BYTES_MAX)
        self.frames: list = []
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "KafkaWire":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send(self, request, version: int, client_id: str | None = "test") -> int:
        """Send without waiting; the correlation id used."""
        self.correlation_id += 1
        header = RequestHeader(type(request).API_KEY, version, self.correlation_id, client_id)
        self.sock.sendall(encode_request(header, request))
        return self.correlation_id

    def send_raw(self, payload: bytes) -> None:
        """One frame holding ``payload`` (the size prefix added)."""
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def receive_frame(self):
        """The next response frame (without its size); None when the broker closed."""
        while not self.frames:
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)

    def receive(self, api_key: int, version: int):
        frame = self.receive_frame()
        assert frame is not None, "the broker closed the connection"
        return decode_response(api_key, version, frame)

    def request(self, request, version: int):
        """Send and wait: the response object (its correlation id checked)."""
        cid = self.send(request, version)
        got, response = self.receive(type(request).API_KEY, version)
        assert got == cid, (got, cid)
        return response

    def closed_by_broker(self, timeout_s: float = 10.0) -> bool:
        """True once the broker has closed the connection (nothing more to read)."""
        deadline = time.monotonic() + timeout_s
        self.sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except ConnectionResetError:
                return True
            if not data:
                return True
        return False
