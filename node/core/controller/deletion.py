"""Topic deletion (/admin/delete_topics; Kafka's TopicDeletionManager). A mixin of
``core.Controller``.

Rules:
- Topic deletion: UpdateMetadata with leader -2 (Kafka's LeaderDuringDelete),
  StopReplica(delete) to every replica; once every replica confirmed (a dead broker's
  replica waits for it to come back), the topic's znodes go.
- A topic with a partition being reassigned waits for the reassignment to finish.
"""
from __future__ import annotations

from node.core.controller.events import (DELETE_STOP_REPLICA_ATTEMPTS_MAX,
                                         TopicDeletionRequested, ZkDelete, ZkResult)
from node.wire import zkdata
from node.wire.errors import ErrorCode


class TopicDeletion:
    """Topic deletion (rules above; state: ``core.Controller``)."""

    # ---------------------------------------------------------------- topic deletion

    def _topic_replica_brokers(self, topic: str) -> set[int]:
        return {r for replicas in self.assignments.get(topic, {}).values() for r in replicas}

    def _on_topic_deletion_requested(self, ev: TopicDeletionRequested) -> None:
        for topic in sorted(set(ev.topics)):
            if topic in self.deleting:
                continue
            if topic not in self.assignments:
                self._log("INFO", f"deletion of unknown topic {topic}: nothing to do")
                self.deletion_queued.discard(topic)
                self._zk([ZkDelete(zkdata.delete_topic_path(topic))], lambda results: None)
                continue
            if any(tp[0] == topic for tp in self.reassigning):
                self._log("INFO", f"deletion of {topic} waits for its reassignments")
                self.deletion_queued.add(topic)
                continue
            self.deletion_queued.discard(topic)
            self._start_topic_deletion(topic)

    def _start_topic_deletion(self, topic: str) -> None:
        self._log("INFO", f"deleting topic {topic}")
        tps = [(topic, p) for p in sorted(self.assignments[topic])]
        self.deleting[topic] = set(self._topic_replica_brokers(topic))
        self._send_update_metadata([], deleted=tps)
        for b in sorted(self.deleting[topic] & set(self.brokers)):
            self._stop_replica_for_deletion(topic, b, 1)
        self._maybe_finish_deletion(topic)

    def _stop_replica_for_deletion(self, topic: str, broker_id: int, attempt: int) -> None:
        tps = [(topic, p) for p, r in sorted(self.assignments[topic].items()) if broker_id in r]

        def on_response(body: dict | None) -> None:
            if topic not in self.deleting:
                return
            ok = body is not None and body.get("error", -1) == ErrorCode.NONE and all(
                e[2] in (ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                for e in body.get("partitions", []) if isinstance(e, list) and len(e) == 3)
            if ok:
                self.deleting[topic].discard(broker_id)
                self._maybe_finish_deletion(topic)
            elif broker_id in self.brokers and attempt < DELETE_STOP_REPLICA_ATTEMPTS_MAX:
                self._stop_replica_for_deletion(topic, broker_id, attempt + 1)
            else:
                self._log("WARN", f"deletion of {topic}: broker {broker_id} did not confirm; "
                                  f"retried when it restarts")

        self._send_stop_replica(broker_id, tps, delete=True, on_response=on_response)

    def _maybe_finish_deletion(self, topic: str) -> None:
        if self.deleting.get(topic):
            return
        ops = [ZkDelete(zkdata.topic_path(topic), recursive=True),
               ZkDelete(zkdata.topic_config_path(topic)),
               ZkDelete(zkdata.delete_topic_path(topic))]

        def on_done(results: tuple[ZkResult, ...]) -> None:
            self._log("INFO", f"topic {topic} deleted")
            self.deleting.pop(topic, None)
            self._forget_topic(topic)

        self._zk(ops, on_done)
