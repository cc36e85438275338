"""``KafkaApis``: one dispatch table from API key to the handler of its request family.

A handler is ``handler(apis, peer, request)``: a decoded ``node.wire.protocol.Request``,
the ``KafkaApis`` (what the handlers need of the broker: its replica manager, metadata
cache, purgatory, coordinator client, controller, epoch) and the peer to answer, which it
answers once through ``apis.send_response(peer, correlation_id, api_key, body, frames)``
(at once, or later from the purgatory or the controller). The peer is opaque to the
handlers: the listener that received the request knows how to answer it
(``node.broker.socket_server``), so another wire can decode its own requests and call the
same table.

``handle`` decodes the native wire's frames. A request that does not decode gets
INVALID_REQUEST when its correlation id can be read (and is dropped otherwise); another
version than ``protocol.API_VERSION`` gets UNSUPPORTED_VERSION; an unknown API key gets
INVALID_REQUEST. A handler's ``ProtocolError`` becomes INVALID_REQUEST; a disk or
coordinator failure costs only its request (``node.broker.failures``); anything else is
a bug and stops the broker.
"""
from __future__ import annotations

from functools import partial
import logging
from typing import TYPE_CHECKING, Callable

from node.broker.apis import (control, delete_records, fetch, log_dirs, metadata, offsets,
                              produce, txn_markers)
from node.broker.apis.txn_rules import VerificationGuards
from node.broker.apis.admin import ADMIN_API_KEYS, handle_admin_request
from node.broker.apis.admin_waits import AdminWaits
from node.broker.apis.common import api_name
from node.broker.coordinator import GuardedZk
from node.broker.failures import EXPECTED_ERRORS
from node.broker.groups.handlers import GROUP_HANDLERS
from node.broker.groups.runtime import GroupRuntime
from node.broker.loop import EventLoop
from node.broker.metadata_cache import MetadataCache
from node.broker.purgatory import FetchPurgatory
from node.broker.shard_runtime import Append
from node.broker.txn.handlers import TXN_HANDLERS
from node.broker.txn.runtime import TxnRuntime
from node.config import BrokerConfig
from node.wire import errors
from node.wire import protocol
from node.wire.errors import ErrorCode

if TYPE_CHECKING:     # the replica manager imports the handlers (no import cycle)
    from node.broker.replica_manager import ReplicaManager

logger = logging.getLogger("node.broker.server")


def _handle_admin(apis, identity, request: protocol.Request) -> None:
    body = handle_admin_request(request.api_key, request.body, zk=apis.zk, config=apis.config,
                                metadata=apis.metadata)
    if request.api_key in ADMIN_WAITING_KEYS:
        apis.admin_waits.answer(identity, request, body)   # once the cache shows it
        return
    apis.send_response(identity, request.correlation_id, request.api_key, body)


ADMIN_WAITING_KEYS = frozenset({protocol.ApiKey.CREATE_TOPICS, protocol.ApiKey.DELETE_TOPICS,
                                protocol.ApiKey.CREATE_PARTITIONS})


Handler = Callable[["KafkaApis", object, protocol.Request], None]

HANDLERS: dict[int, Handler] = {
    protocol.ApiKey.PRODUCE: produce.handle_produce,
    protocol.ApiKey.FETCH: fetch.handle_fetch,
    protocol.ApiKey.LIST_OFFSETS: offsets.handle_list_offsets,
    protocol.ApiKey.METADATA: metadata.handle_metadata,
    protocol.ApiKey.LEADER_AND_ISR: control.handle_leader_and_isr,
    protocol.ApiKey.STOP_REPLICA: control.handle_stop_replica,
    protocol.ApiKey.UPDATE_METADATA: control.handle_update_metadata,
    protocol.ApiKey.CONTROLLED_SHUTDOWN: control.handle_controlled_shutdown,
    protocol.ApiKey.OFFSET_FOR_LEADER_EPOCH: offsets.handle_offset_for_leader_epoch,
    protocol.ApiKey.GET_REPLICA_LOG_INFO: control.handle_get_replica_log_info,
    protocol.ApiKey.DESCRIBE_CLUSTER: metadata.handle_describe_cluster,
    protocol.ApiKey.DESCRIBE_LOG_DIRS: log_dirs.handle_describe_log_dirs,
    protocol.ApiKey.DELETE_RECORDS: delete_records.handle_delete_records,
    protocol.ApiKey.WRITE_TXN_MARKERS: txn_markers.handle_write_txn_markers,
}
assert not set(HANDLERS) & set(ADMIN_API_KEYS)
HANDLERS.update((key, _handle_admin) for key in ADMIN_API_KEYS)
assert not set(HANDLERS) & set(GROUP_HANDLERS)
HANDLERS.update(GROUP_HANDLERS)       # the group coordinator (node.broker.groups)
# The transaction coordinator (node.broker.txn); its InitProducerId replaces the admin
# one (which it still calls for a request without a transactional id).
assert not set(HANDLERS) & set(TXN_HANDLERS) - {protocol.ApiKey.INIT_PRODUCER_ID}
HANDLERS.update(TXN_HANDLERS)


class KafkaApis:
    def __init__(self, *, config: BrokerConfig, zk: GuardedZk, loop: EventLoop,
                 replicas: ReplicaManager, metadata: MetadataCache,
                 send_response: Callable[..., None], broker_epoch: Callable[[], int],
                 controller: Callable[[], object]) -> None:
        self.config = config
        self.zk = zk
        self.loop = loop
        self.replicas = replicas
        self.metadata = metadata
        self.send_response = send_response   # (peer, correlation id, api key, body, frames)
        self.broker_epoch = broker_epoch     # this incarnation's (KIP-380); -1 unregistered
        self.controller = controller         # the ControllerRunner, once started
        self.cluster_id: str | None = None   # set by the broker once read (DescribeCluster)
        self.purgatory = FetchPurgatory(loop, partial(fetch.read_fetch, self),
                                        partial(fetch.answer_fetch, self))
        # CreateTopics, CreatePartitions, DeleteTopics answered once this broker's
        # metadata shows them (Kafka's DelayedCreatePartitions / DelayedDeleteTopics).
        self.admin_waits = AdminWaits(loop, metadata,
                                      lambda *args: self.send_response(*args))
        # The group coordinator: one shard per __consumer_offsets partition led here.
        self.groups = GroupRuntime(self)
        # The transaction coordinator: one shard per __transaction_state partition led here.
        self.txn = TxnRuntime(self)
        # Requests to other brokers (the transaction markers): the broker's Outbound,
        # set once it is built; None in a KafkaApis without a broker.
        self.outbound = None
        self.pending_produces = 0            # acks=all partition appends waiting
        # Traced acks=all writes waiting for their followers: partition key ->
        # (last offset, the request's trace). Empty unless a client asked for a trace.
        self.traces: dict[tuple[str, int], tuple[int, dict]] = {}
        self.trace_replica = -1  # the follower whose fetch is being applied
        # KIP-890 part 1: the transaction verifications in flight (node.broker.apis.txn_rules)
        # and how to reach the transaction coordinator's broker (set by the server:
        # (endpoint, api key, body, on_response(Response | None))).
        self.txn_guards = VerificationGuards()
        self.send_to_broker: Callable[..., None] | None = None

    def on_produce_complete(self, part, effect) -> None:
        """An acks=all append completed: a Produce's, a coordinator's, or a transaction
        marker's."""
        if isinstance(effect.request_id, Append):
            effect.request_id.runtime.on_append_complete(effect.request_id, effect)
        elif isinstance(effect.request_id, txn_markers.MarkerAppend):
            txn_markers.on_marker_complete(self, part, effect)
        else:
            produce.on_produce_complete(self, part, effect)

    def handle(self, identity, frames) -> None:
        """One request of the native wire (``node.wire.protocol``), answered through
        ``send_response``."""
        try:
            request = protocol.decode_request(frames)
        except protocol.ProtocolError as e:
            correlation_id = protocol.peek_correlation_id(frames)
            logger.warning("malformed request (correlation id %s): %s", correlation_id, e)
            if correlation_id is not None:
                api_key = protocol.peek_api_key(frames)
                self.send_response(identity, correlation_id,
                                   api_key if api_key is not None else -1,
                                   {"error": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
            return
        if request.api_key == protocol.ApiKey.API_VERSIONS:
            self._handle_api_versions(identity, request)
            return
        if request.api_version != protocol.API_VERSION:
            name = api_name(request.api_key)
            self.send_response(identity, request.correlation_id, request.api_key,
                               {"error": ErrorCode.UNSUPPORTED_VERSION,
                                "error_message": f"{name} version {request.api_version} is "
                                                 f"not supported (versions {protocol.API_VERSION} "
                                                 f"to {protocol.API_VERSION}; see ApiVersions)"})
            return
        self.dispatch(identity, request)

    def dispatch(self, identity, request: protocol.Request) -> None:
        """Run a decoded request through its handler (``HANDLERS``): the one path of
        every wire (the native one above, Kafka's through ``node.kafka.listener``). A
        handler's ``ProtocolError`` or an expected failure is answered with an
        ``{"error", "error_message"}`` body."""
        try:
            handler = HANDLERS.get(request.api_key)
            if handler is not None:
                handler(self, identity, request)
            else:
                self.send_response(identity, request.correlation_id, request.api_key,
                                   {"error": ErrorCode.INVALID_REQUEST,
                                    "error_message": f"unsupported api key {request.api_key}"})
        except protocol.ProtocolError as e:
            logger.warning("invalid %s request from %s: %s", api_name(request.api_key),
                           request.client_id, e)
            self.send_response(identity, request.correlation_id, request.api_key,
                               {"error": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
        except EXPECTED_ERRORS as e:
            # A disk or coordinator failure costs this request; anything else is a bug
            # and stops the broker (node.broker.failures).
            code = errors.code_for_exception(e)
            logger.error("%s request failed: %s", api_name(request.api_key), e)
            self.send_response(identity, request.correlation_id, request.api_key,
                               {"error": code, "error_message": str(e)})

    def _handle_api_versions(self, identity, request: protocol.Request) -> None:
        """Kafka's ApiVersions: every API this broker answers, with its version range.
        Answered in any version (a client learns the ranges from it)."""
        keys = [[int(k), protocol.API_VERSION, protocol.API_VERSION]
                for k in sorted(protocol.ApiKey)
                if k in HANDLERS or k == protocol.ApiKey.API_VERSIONS]
        error = ErrorCode.NONE if request.api_version == protocol.API_VERSION else \
            ErrorCode.UNSUPPORTED_VERSION
        self.send_response(identity, request.correlation_id, request.api_key,
                           {"error": error, "api_keys": keys})
