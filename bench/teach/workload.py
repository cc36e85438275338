"""The dashboard's workload: a producer per partition and a consumer of the topic,
counting what was acknowledged, read, and lost so far. Native (in-process) or a real
Kafka client's worker processes (``bench.chaos.clients``)."""
from __future__ import annotations

import threading


class Workload:
    """A producer per partition (acks=all) and a consumer of the same topic; counts
    acknowledged, read, and lost so far (an acknowledged value that the consumer, reading
    past its offset, found replaced by another). ``client`` other than native: the
    producers (``ClientWriter``) and the consumer (a ``WorkerStream`` reading every
    partition from the start) are that client's worker processes."""

    def __init__(self, cluster, topic: str, client: str = "native"):
        from bench.teach.stage import Writer
        from node.client import Admin
        self.topic, self.client = topic, client
        admin = Admin(bootstrap_servers=cluster.bootstrap_servers)
        try:
            partitions = [m.partition for m in admin.describe_topics([topic])[topic]]
        finally:
            admin.close()
        self.read = self.lost = 0
        self.seen: dict = {}
        self.consumer = None
        self._stop = threading.Event()
        self._bootstrap = cluster.bootstrap_servers
        self._partitions = partitions
        if client == "native":
            self.writers = [Writer(cluster.bootstrap_servers, topic, f"d{p}", partition=p,
                                   pause_s=0.02).start() for p in partitions]
            target = self._consume
        else:
            self.writers = []
            try:
                self._start_client(cluster, topic, partitions)
            except BaseException:
                self._stop_all()
                raise
            target = self._follow
        self.label = self.writers[0].label if self.writers else client
        self._thread = threading.Thread(target=target, name="dashboard-consumer",
                                        daemon=True)
        self._thread.start()

    def _start_client(self, cluster, topic: str, partitions: list) -> None:
        from bench.chaos.clients import WorkerStream, worker_command
        from bench.teach.client_writer import ClientWriter
        bootstrap = cluster.kafka_bootstrap_servers
        for p in partitions:
            self.writers.append(ClientWriter(self.client, bootstrap, topic, f"d{p}",
                                             partition=p, pause_s=0.02,
                                             log_dir=cluster.dir).start())
        self.consumer = WorkerStream(
            worker_command(self.client, role="consumer", name="dc", bootstrap=bootstrap,
                           topic=topic, duration=0),
            log_path=cluster.dir / f"dashboard-consumer-{self.client}.log")

    def _note(self, records) -> None:
        """``records``: (partition, offset, value) read; recount the lost."""
        for partition, offset, value in records:
            self.seen[(partition, offset)] = value
            self.read += 1
        if records:
            acked = self._acked()
            self.lost = sum(1 for key, value in acked.items()
                            if key in self.seen and self.seen[key] != value)

    def _follow(self) -> None:
        """A client's consumer: take its poll ops as they come."""
        done = 0
        while not self._stop.wait(0.2):
            ops = self.consumer.history()
            fresh, done = ops[done:], len(ops)
            self._note([tuple(r) for op in fresh if op.f == "poll" and op.type == "ok"
                        for r in op.reads])

    def _acked(self) -> dict:
        out = {}
        for w in self.writers:
            for op in w.history():
                if op.type == "ok":
                    out[(op.partition, op.offset)] = op.value
        return out

    def _consume(self) -> None:
        from node.client import Consumer
        consumer = Consumer(bootstrap_servers=self._bootstrap, auto_offset_reset="earliest",
                            fetch_max_wait_ms=100)
        try:
            consumer.assign([(self.topic, p) for p in self._partitions])
            consumer.seek_to_beginning()
            while not self._stop.is_set():
                try:
                    records = consumer.poll(timeout_ms=200)
                except Exception:
                    self._stop.wait(0.2)
                    continue
                self._note([(r.partition, r.offset, r.value) for r in records])
        finally:
            consumer.close()

    def counts(self) -> dict:
        return {"running": not self._stop.is_set(), "topic": self.topic,
                "client": self.label,
                "acknowledged": sum(w.acked for w in self.writers),
                "refused": sum(w.failed for w in self.writers),
                "unknown": sum(w.unknown for w in self.writers),
                "read": self.read, "lost": self.lost}

    def stop(self) -> None:
        self._stop_all()
        self._thread.join(timeout=10)

    def _stop_all(self) -> None:
        """Every producer and the client's consumer, in parallel (each flushes)."""
        self._stop.set()
        parts = list(self.writers) + ([self.consumer] if self.consumer is not None else [])
        stoppers = [threading.Thread(target=(w.stop if w is not self.consumer else
                                             lambda: self.consumer.stop(10)), daemon=True)
                    for w in parts]
        for t in stoppers:
            t.start()
        for t in stoppers:
            t.join(timeout=60)
