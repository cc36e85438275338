"""The transaction coordinator's runtime on a broker: one ``TxnShard`` (the pure core,
``node.core.txn``) per ``__transaction_state`` partition this broker leads.

Loading, unloading, acks=all appends with replies after commit, failure mapping and
timers are the shared ``node.broker.shard_runtime.ShardRuntime``'s; this module adds the
transaction side: the shard (its coordinator epoch is the partition's leader epoch, as
Kafka's), its config from the broker's keys, the producer ids (the broker's block
allocator, ``node.broker.apis.admin.producer_ids``), and the markers: a Result's
``markers`` go to the marker channel (``node.broker.txn.markers``) once its records are
committed, and the channel's completion goes back to the shard (``markers_done``).
Appends wait at most ``request.timeout.ms`` for their replicas (Kafka's transaction log
appends do).

Requests that would only be told CONCURRENT_TRANSACTIONS (InitProducerId,
AddPartitionsToTxn v0-3, AddOffsetsToTxn for an id whose markers are being written:
PrepareCommit/PrepareAbort) wait here instead, up to ``PARKED_MAX_MS``, and run as soon
as the transaction completes: the same answer a client retrying later would get, without
its retry backoff (librdkafka's costs tens of ms per transaction). Past the limit, or if
the partition is unloaded, they run as they are (CONCURRENT_TRANSACTIONS,
NOT_COORDINATOR).
"""
from __future__ import annotations

import dataclasses
import logging
from functools import partial
from typing import Callable

from node.broker.coordinator import CoordinatorUnavailable
from node.broker.loop import now_ms
from node.broker.shard_runtime import Hosted, ShardRuntime, config_from_broker
from node.broker.txn import bodies
from node.broker.txn.markers import MarkerChannel
from node.broker.txn.state_topic import (TRANSACTION_STATE_TOPIC, TxnStateTopicCreator,
                                         partition_for)
from node.core.txn.config import TxnConfig
from node.core.txn.shard import ProducerIdsUnavailable, TxnShard
from node.core.txn.state import PREPARING
from node.wire.protocol import ApiKey

logger = logging.getLogger("node.broker.server")

# How long a request waits for a transaction's markers before it is answered
# CONCURRENT_TRANSACTIONS (the client retries then).
PARKED_MAX_MS = 5000
# Requests waiting so, per partition (a named limit: beyond it they are answered at once).
PARKED_PER_PARTITION_MAX = 10_000


@dataclasses.dataclass(eq=False)
class Parked:
    """A request waiting for its transactional id's markers."""

    run: Callable[[], None]
    timer: int | None = None


def txn_config(config) -> TxnConfig:
    """The shard's ``TxnConfig`` from the broker's keys."""
    return config_from_broker(TxnConfig, config)


class TxnRuntime(ShardRuntime):
    topic = TRANSACTION_STATE_TOPIC
    what = "transaction coordinator"

    def __init__(self, apis) -> None:
        super().__init__(apis, TxnStateTopicCreator(apis.zk, apis.config, apis.metadata))
        self._txn_config = None
        self.markers = MarkerChannel(self)
        # (hosted, transactional id) -> requests waiting for its markers
        self.parked: dict[tuple[Hosted, str], list[Parked]] = {}

    @property
    def txn_config(self) -> TxnConfig:
        if self._txn_config is None:
            self._txn_config = txn_config(self.config)
        return self._txn_config

    @property
    def load_buffer_size(self) -> int:
        return self.config.transaction_state_log_load_buffer_size

    @property
    def commit_timeout_ms(self) -> int:
        return self.config.request_timeout_ms

    def new_shard(self, partition: int, leader_epoch: int) -> TxnShard:
        return TxnShard(partition, self.txn_config, leader_epoch,
                        allocate_producer_id=self.allocate_producer_id)

    def allocate_producer_id(self) -> int:
        """A producer id from the broker's block; ProducerIdsUnavailable (the request is
        answered retriable) when a new block cannot be reserved now."""
        # (imported here: node.broker.apis imports this module)
        from node.broker.apis.admin.producer_ids import allocate_producer_id
        try:
            return allocate_producer_id(self.apis.zk, self.config)
        except CoordinatorUnavailable as e:
            raise ProducerIdsUnavailable(str(e)) from e

    def error_body(self, api_key: int, body: dict, code: int) -> dict:
        return bodies.error_body(api_key, body, code)

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.partitions())

    # ================================================================ requests

    def call(self, partition: int, api_key: int, version: int, body: dict,
             answer: Callable[[dict], None], **extra) -> None:
        run = partial(super().call, partition, api_key, version, body, answer, **extra)
        tid = _waits_for_markers(api_key, version, body)
        hosted = self.hosted.get(partition)
        if tid is None or hosted is None or hosted.loading or hosted.gone:
            run()
            return
        meta = hosted.shard.transaction(tid)
        waiting = self.parked.setdefault((hosted, tid), [])
        if meta is None or meta.state not in PREPARING or \
                sum(len(v) for (h, _), v in self.parked.items() if h is hosted) \
                >= PARKED_PER_PARTITION_MAX:
            if not waiting:
                del self.parked[(hosted, tid)]
            run()
            return
        parked = Parked(run)
        waiting.append(parked)
        parked.timer = self.loop.call_later(
            PARKED_MAX_MS, lambda: self._unpark(hosted, tid, [parked]))

    def _unpark(self, hosted: Hosted, tid: str, which: list[Parked] | None = None) -> None:
        """Run the parked requests of ``tid`` (``which`` of them; all if None)."""
        waiting = self.parked.get((hosted, tid), [])
        chosen = list(waiting) if which is None else [p for p in which if p in waiting]
        for parked in chosen:
            waiting.remove(parked)
        if not waiting:
            self.parked.pop((hosted, tid), None)
        for parked in chosen:
            self.loop.cancel(parked.timer)
            parked.run()

    # ================================================================ markers

    def released(self, hosted: Hosted, result) -> None:
        super().released(hosted, result)
        for marker in getattr(result, "markers", None) or ():
            self.markers.send(hosted, marker)

    def markers_done(self, hosted: Hosted, marker, results: dict) -> None:
        """Every partition of ``marker`` answered: the shard completes the transaction."""
        if hosted.gone or hosted.loading or self.hosted.get(hosted.partition) is not hosted:
            return
        self._apply(hosted, hosted.shard.markers_done(
            now_ms(), marker.transactional_id, marker.producer_id, marker.producer_epoch,
            results))
        self._unpark(hosted, marker.transactional_id)

    def _unload(self, hosted: Hosted, why: str) -> None:
        super()._unload(hosted, why)
        self.markers.unloaded(hosted)
        for h, tid in [k for k in self.parked if k[0] is hosted]:
            self._unpark(h, tid)     # NOT_COORDINATOR now: the client finds the new one

    def metadata_updated(self) -> None:
        self.sync()
        self.markers.leaders_changed()


def _waits_for_markers(api_key: int, version: int, body: dict) -> str | None:
    """The transactional id of a request that CONCURRENT_TRANSACTIONS would refuse while
    its markers are written; None for the others."""
    if api_key in (ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_OFFSETS_TO_TXN):
        tid = body.get("transactional_id")
    elif api_key == ApiKey.ADD_PARTITIONS_TO_TXN and \
            version < bodies.ADD_PARTITIONS_BATCHED_FROM:
        tid = body.get("v3_and_below_transactional_id")
    else:
        return None
    return tid if isinstance(tid, str) and tid else None
