"""A scenario's writer backed by a real Kafka client: one worker process
(``bench.chaos.clients``: confluent-kafka, kafka-python, aiokafka or kafkajs) producing
``<name>-<n>`` to one partition through the brokers' Kafka listeners, with the
interface of ``stage.Writer`` (``acked``, ``failed``, ``unknown``, ``last_error``,
``history()``, ``counts()``, ``stop()``, ``topic``, ``name``, ``partition``).

Unlike the native writer, which sends one value at a time, the client pipelines: its
own batching, retries and timeouts are what the scenario shows. The worker runs in the
supervisor's network namespace, as the native writer does: with ``--netns`` it reaches
every broker over their management links, which no fault cuts (the scenarios'
producers "sit outside the partition").

Options the scenario sets: the partition, acks (with acks 1 or 0 idempotence off,
which those acks require), the request and delivery timeouts (aiokafka has none of the
latter: its batches expire after the request timeout). Everything else is the
client's default. The worker stops when its stdin closes (``--duration 0``), after
waiting up to ``flush_timeout_s`` for outstanding sends.
"""
from __future__ import annotations

from pathlib import Path

START_TIMEOUT_S = 30.0       # the worker's start event (imports, node start-up)
FLUSH_MARGIN_S = 2.0         # flush: the delivery timeout plus this
STOP_MARGIN_S = 10.0         # stop: the flush plus this, then SIGTERM/SIGKILL
RATE_MAX_PER_S = 200
# aiokafka has no delivery timeout: its batches expire after request_timeout_ms.
NO_DELIVERY_TIMEOUT = frozenset({"aiokafka"})


class ClientWriterError(Exception):
    """The worker could not start (the message says why, with its log's last lines)."""


class ClientWriter:
    def __init__(self, client: str, bootstrap: str, topic: str, name: str, *,
                 acks="all", partition: int = 0, request_timeout_ms: int = 1500,
                 delivery_timeout_ms: int = 4000, pause_s: float = 0.005,
                 log_dir: Path | None = None):
        from bench.chaos.clients import WorkerStream, worker_command
        self.client, self.topic, self.name, self.partition = client, topic, name, partition
        self.flush_timeout_s = delivery_timeout_ms / 1000 + FLUSH_MARGIN_S
        rate = min(RATE_MAX_PER_S, max(1, round(1 / pause_s))) if pause_s else RATE_MAX_PER_S
        options = dict(role="producer", name=name, bootstrap=bootstrap, topic=topic,
                       duration=0, rate=rate, partition=partition, acks=str(acks),
                       request_timeout_ms=request_timeout_ms,
                       delivery_timeout_ms=delivery_timeout_ms,
                       flush_timeout_s=self.flush_timeout_s)
        if str(acks) != "all":
            options["idempotence"] = "off"
        if client in NO_DELIVERY_TIMEOUT:
            del options["delivery_timeout_ms"]
        command = worker_command(client, **options)
        log = Path(log_dir or ".") / f"writer-{name}-{client}.log"
        self.log_path = log
        self.stream = WorkerStream(command, log_path=log)
        self._stopped = False

    # --------------------------------------------------------------- start
    def start(self) -> "ClientWriter":
        """Wait for the worker's start event; a worker that dies first is an error."""
        from node.waiting import poll_until
        try:
            poll_until(lambda: self.stream.client_info is not None or
                       self.stream.returncode is not None, START_TIMEOUT_S,
                       f"{self.client} worker {self.name} to start", interval_s=0.05)
        except TimeoutError:
            pass
        if self.stream.client_info is None:
            self.stream.stop(5)
            raise ClientWriterError(f"{self.client} worker {self.name} did not start "
                                    f"(exit {self.stream.returncode}): {self._log_tail()}")
        return self

    def _log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return " | ".join(text[-lines:]) or "empty log"

    # --------------------------------------------------------------- the Writer interface
    @property
    def acked(self) -> int:
        return self.stream.acked

    @property
    def failed(self) -> int:
        return self.stream.failed

    @property
    def unknown(self) -> int:
        return self.stream.unknown

    @property
    def last_error(self) -> str:
        return self.stream.last_error or ""

    def counts(self) -> tuple[int, int, int]:
        return self.acked, self.failed, self.unknown

    def history(self) -> list:
        return self.stream.history()

    @property
    def client_events(self) -> list[dict]:
        return list(self.stream.client_events)

    @property
    def label(self) -> str:
        """``<client> <version>`` as the worker's start event says."""
        info = self.stream.client_info or {}
        return f"{info.get('client', self.client)} {info.get('version', '')}".strip()

    def stop(self) -> None:
        """Close the worker's stdin: it flushes (up to the delivery timeout) and ends."""
        if self._stopped:
            return
        self._stopped = True
        self.stream.stop(self.flush_timeout_s + STOP_MARGIN_S)
