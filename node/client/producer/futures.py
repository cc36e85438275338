"""The futures ``send`` returns: one ``ProduceRequestResult`` per batch (Kafka's name),
shared by the futures of its records; the sender completes it.

Rules: ``done`` and the callback list change together under the producer's done
condition, so a callback is run exactly once, by the sender or by ``add_callback``.
"""
from __future__ import annotations

import logging
import threading

from node.client.types import BatchMetadata, KafkaTimeoutError, RecordMetadata

log = logging.getLogger("minikafka.producer")


class ProduceRequestResult:
    """The outcome of one batch, shared by the futures of its records."""

    __slots__ = ("topic", "partition", "base_offset", "record_count", "timestamp",
                 "timestamps", "error", "done", "callbacks", "attempts")

    def __init__(self, topic: str, partition: int):
        self.topic = topic
        self.partition = partition
        self.base_offset = -1
        self.record_count = 0
        self.timestamp = -1
        self.timestamps = None
        self.error: BaseException | None = None
        self.done = False
        self.callbacks = None
        self.attempts = 0       # Produce requests that carried the batch (retries + 1)


class _Future:
    __slots__ = ("_result", "_index", "_done_condition")

    def __init__(self, result: ProduceRequestResult, index: int,
                 done_condition: threading.Condition):
        self._result = result
        self._index = index
        self._done_condition = done_condition

    def done(self) -> bool:
        return self._result.done

    def _wait(self, timeout: float | None) -> ProduceRequestResult:
        result = self._result
        if not result.done:
            with self._done_condition:
                if not self._done_condition.wait_for(lambda: result.done, timeout):
                    raise KafkaTimeoutError(f"no acknowledgement within {timeout} s")
        if result.error is not None:
            raise result.error
        return result

    def exception(self) -> BaseException | None:
        return self._result.error if self._result.done else None

    def succeeded(self) -> bool:
        return self._result.done and self._result.error is None

    def failed(self) -> bool:
        return self._result.done and self._result.error is not None

    @property
    def attempts(self) -> int:
        """How many Produce requests carried the record's batch. A failure after more
        than one is not definite: an earlier attempt's outcome may have been unknown
        (a timeout, a lost connection) and the record may be in the log."""
        return self._result.attempts

    def add_callback(self, fn) -> "_Future":
        """``fn(metadata, exception)`` — called in the I/O thread (or now, if done)."""
        if self._result.done:
            self._call(fn)
        else:
            with self._done_condition:
                if not self._result.done:
                    if self._result.callbacks is None:
                        self._result.callbacks = []
                    self._result.callbacks.append((self, fn))
                    return self
            self._call(fn)
        return self

    def _call(self, fn) -> None:
        try:
            if self._result.error is not None:
                fn(None, self._result.error)
            else:
                fn(self._value(self._result), None)
        except Exception:
            log.exception("producer callback failed")


class FutureRecordMetadata(_Future):
    """``get(timeout)`` -> RecordMetadata(topic, partition, offset, timestamp)."""

    __slots__ = ()

    def get(self, timeout: float | None = None) -> RecordMetadata:
        return self._value(self._wait(timeout))

    def _value(self, r: ProduceRequestResult) -> RecordMetadata:
        offset = r.base_offset + self._index if r.base_offset >= 0 else -1
        ts = r.timestamps[self._index] if r.timestamps is not None else r.timestamp
        return RecordMetadata(r.topic, r.partition, offset, ts)


class FutureBatchMetadata(_Future):
    """``get(timeout)`` -> BatchMetadata(topic, partition, base_offset, record_count, timestamp)."""

    __slots__ = ()

    def get(self, timeout: float | None = None) -> BatchMetadata:
        return self._value(self._wait(timeout))

    def _value(self, r: ProduceRequestResult) -> BatchMetadata:
        return BatchMetadata(r.topic, r.partition, r.base_offset, r.record_count, r.timestamp)
