"""Requests from the controller: LeaderAndIsr, UpdateMetadata, StopReplica and
GetReplicaLogInfo (KIP-966's unclean recovery); and ControlledShutdown, which a broker
sends to the controller (answered by the controller runner while this broker holds
/controller, else NOT_CONTROLLER).

A controller request is refused (``fenced``) when it comes from a controller epoch older
than the highest seen (STALE_CONTROLLER_EPOCH) or is meant for another incarnation of
this broker (STALE_BROKER_EPOCH, KIP-380). Partition names are Kafka's legal topic names
only (``check_partitions``): they become directories and shared-memory names.
"""
from __future__ import annotations

import logging

from node.broker.apis.common import NONE, api_name
from node.broker.failures import COORDINATOR_ERRORS, STORAGE_ERRORS
from node.wire import protocol
from node.wire.control import (LeaderAndIsrPartition, StopReplicaPartition,
                               UpdateMetadataPartition)
from node.wire.errors import ErrorCode
from shm.names import topic_name_error

logger = logging.getLogger("node.broker.server")


def fenced(apis, request: protocol.Request) -> int:
    """The error (logged) if the request comes from a stale controller
    (STALE_CONTROLLER_EPOCH) or is meant for another incarnation of this broker
    (STALE_BROKER_EPOCH, KIP-380: the controller read a registration this process
    did not make); else NONE."""
    controller_id = protocol.field(request.body, "controller_id", int)
    epoch = protocol.field(request.body, "controller_epoch", int)
    broker_epoch = protocol.field(request.body, "broker_epoch", int, optional=True, default=-1)
    if broker_epoch >= 0 and broker_epoch != apis.broker_epoch():
        logger.warning("refusing %s from controller %d: it is meant for broker epoch %d, "
                       "this incarnation's is %d (STALE_BROKER_EPOCH)",
                       api_name(request.api_key), controller_id, broker_epoch,
                       apis.broker_epoch())
        return ErrorCode.STALE_BROKER_EPOCH
    if apis.replicas.check_controller_epoch(epoch):
        return NONE
    logger.warning("refusing %s from controller %d with epoch %d: the latest controller "
                   "epoch seen is %d (STALE_CONTROLLER_EPOCH)", api_name(request.api_key),
                   controller_id, epoch, apis.replicas.controller_epoch)
    return ErrorCode.STALE_CONTROLLER_EPOCH


def check_partitions(entries) -> None:
    """Controller requests name directories and shared memory: Kafka's legal topic names
    only (a name like ``../x`` must never reach a path)."""
    for e in entries:
        if topic_name_error(e.topic) is not None:
            raise protocol.ProtocolError(f"illegal topic-partition {e.topic!r}-{e.partition}")


def handle_leader_and_isr(apis, identity, request: protocol.Request) -> None:
    body = request.body
    entries = LeaderAndIsrPartition.list_from_wire(protocol.field(body, "partitions", list))
    check_partitions(entries)
    live = protocol.field(body, "live_leaders", list, optional=True, default=[])
    for item in live:
        if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], int)
                and isinstance(item[1], str) and isinstance(item[2], int)):
            raise protocol.ProtocolError("live_leaders entries are [id, host, port]")
    error = fenced(apis, request)
    if error:
        apis.send_response(identity, request.correlation_id, request.api_key,
                           {"error": error, "partitions": []})
        return
    for broker_id, host, port in live:
        apis.replicas.leader_endpoints[broker_id] = f"tcp://{host}:{port}"
    controller_epoch = body["controller_epoch"]
    out = []
    for e in entries:
        error = apis.replicas.become_leader_or_follower(controller_epoch, e)
        if error == NONE:
            apis.purgatory.release((e.topic, e.partition))
        out.append([e.topic, e.partition, error])
    apis.groups.sync()      # the group coordinator loads or unloads its partitions
    apis.txn.sync()         # so does the transaction coordinator
    apis.send_response(identity, request.correlation_id, request.api_key,
                       {"error": NONE, "partitions": out})


def _listener_map(value) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(a, list) and len(a) == 2 and isinstance(a[0], str)
        and isinstance(a[1], int) and not isinstance(a[1], bool) for k, a in value.items())


def handle_update_metadata(apis, identity, request: protocol.Request) -> None:
    body = request.body
    brokers = protocol.field(body, "brokers", list)
    for b in brokers:
        if not (isinstance(b, list) and len(b) in (4, 5) and isinstance(b[0], int) and
                isinstance(b[1], str) and isinstance(b[2], int) and
                (b[3] is None or isinstance(b[3], str)) and
                (len(b) == 4 or _listener_map(b[4]))):
            raise protocol.ProtocolError("brokers entries are [id, host, port, rack|None"
                                         "(, {listener: [host, port]})]")
    topic_ids = protocol.field(body, "topic_ids", dict, optional=True, default={})
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in topic_ids.items()):
        raise protocol.ProtocolError("topic_ids maps topic names to ids")
    entries = UpdateMetadataPartition.list_from_wire(protocol.field(body, "partitions", list))
    check_partitions(entries)
    error = fenced(apis, request)
    if error:
        apis.send_response(identity, request.correlation_id, request.api_key, {"error": error})
        return
    apis.metadata.update(body["controller_id"], brokers, entries, topic_ids)
    apis.admin_waits.check()
    apis.groups.metadata_updated()
    apis.txn.metadata_updated()
    apis.send_response(identity, request.correlation_id, request.api_key, {"error": NONE})


def handle_stop_replica(apis, identity, request: protocol.Request) -> None:
    body = request.body
    delete = protocol.field(body, "delete_partitions", bool)
    entries = StopReplicaPartition.list_from_wire(protocol.field(body, "partitions", list))
    check_partitions(entries)
    error = fenced(apis, request)
    if error:
        apis.send_response(identity, request.correlation_id, request.api_key,
                           {"error": error, "partitions": []})
        return
    out = []
    for e in entries:
        error = apis.replicas.stop_replica(e.topic, e.partition, e.leader_epoch, delete)
        apis.purgatory.release((e.topic, e.partition))
        out.append([e.topic, e.partition, error])
    apis.groups.sync()
    apis.txn.sync()
    apis.send_response(identity, request.correlation_id, request.api_key,
                       {"error": NONE, "partitions": out})


def handle_get_replica_log_info(apis, identity, request: protocol.Request) -> None:
    """KIP-966's unclean recovery asks each replica how far its log goes: the last
    leader epoch in its epoch cache and its log end offset."""
    entries = protocol.entries(request.body, "partitions", 2)
    error = fenced(apis, request)
    if error:
        apis.send_response(identity, request.correlation_id, request.api_key,
                           {"error": error, "partitions": []})
        return
    out = []
    for topic, partition in entries:
        if not isinstance(topic, str) or not isinstance(partition, int):
            raise protocol.ProtocolError("partitions are [topic, partition]")
        try:
            part = apis.replicas.open_partition(topic, partition)
            out.append([topic, partition, NONE, part.view.latest_epoch(),
                        part.log.log_end_offset])
        except STORAGE_ERRORS + COORDINATOR_ERRORS as e:
            logger.warning("%s-%d: cannot tell the log's end: %s", topic, partition, e)
            out.append([topic, partition, ErrorCode.KAFKA_STORAGE_ERROR, -1, -1])
    apis.send_response(identity, request.correlation_id, request.api_key,
                       {"error": NONE, "partitions": out})


def handle_controlled_shutdown(apis, identity, request: protocol.Request) -> None:
    protocol.field(request.body, "broker_id", int)
    controller = apis.controller()
    if controller is None or not controller.active:
        apis.send_response(identity, request.correlation_id, request.api_key,
                           {"error": ErrorCode.NOT_CONTROLLER, "remaining_partitions": []})
        return
    controller.handle_controlled_shutdown(
        request.body, lambda body: apis.send_response(identity, request.correlation_id,
                                                      request.api_key, body))
