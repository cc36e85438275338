"""DescribeCluster, ElectLeaders, AlterPartitionReassignments and
ListPartitionReassignments through the native handlers (``node.broker.apis.metadata``,
``node.broker.apis.admin.elections`` and ``reassignments``).

- DescribeCluster: the live brokers' Kafka endpoints (the listener the request came by,
  as Kafka), the controller and the cluster id from the broker's metadata cache; only
  brokers are described (endpoint type 1), anything else is MISMATCHED_ENDPOINT_TYPE.
- ElectLeaders: preferred (0) or unclean (1); v0 has no type and means preferred; null
  partitions: every partition the broker's metadata knows, each answered. A
  partition that needs no election is ELECTION_NOT_NEEDED, one whose preferred replica
  is down or out of the ISR PREFERRED_LEADER_NOT_AVAILABLE, one with no live replica
  ELIGIBLE_LEADERS_NOT_AVAILABLE, as Kafka. The answer comes once the election is
  handed to the controller (/admin/preferred_replica_election), as Kafka's ZK mode did
  before KIP-460's wait.
- Reassignments: a null replica list cancels (NO_REASSIGNMENT_IN_PROGRESS if there is
  none); any broker serves them (never NOT_CONTROLLER).
"""
from __future__ import annotations

from node.kafka.protocol.messages import (AlterPartitionReassignmentsResponse,
                                          DescribeClusterResponse, ElectLeadersResponse,
                                          ListPartitionReassignmentsResponse)
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.wire import protocol
from node.wire.errors import ErrorCode

ENDPOINT_TYPE_BROKER = 1


def by_topic(entries) -> dict[str, list]:
    """[[topic, partition, ...], ...] -> {topic: [[partition, ...], ...]}, in order."""
    out: dict[str, list] = {}
    for topic, *rest in entries:
        out.setdefault(topic, []).append(rest)
    return out


# ------------------------------------------------------------------ DescribeCluster

class DescribeCluster(TranslationBase):
    api_key = protocol.ApiKey.DESCRIBE_CLUSTER
    versions = (0, 1)

    def request(self, ctx, header, request):
        if header.api_version >= 1 and request.endpoint_type != ENDPOINT_TYPE_BROKER:
            return DescribeClusterResponse(
                error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                error_message=f"The request was sent to an endpoint of type broker, but "
                              f"we wanted an endpoint of type {request.endpoint_type}",
                endpoint_type=ENDPOINT_TYPE_BROKER, cluster_id=ctx.cluster_id() or "")
        return NativeCall(protocol.ApiKey.DESCRIBE_CLUSTER, {})

    def response(self, ctx, header, request, body, frames):
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=body["error"], error_message=None,
            endpoint_type=ENDPOINT_TYPE_BROKER, cluster_id=body["cluster_id"],
            controller_id=body["controller_id"],
            brokers=[DescribeClusterResponse.DescribeClusterBroker(
                broker_id=i, host=h, port=p, rack=r) for i, h, p, r in ctx.brokers()])


# ------------------------------------------------------------------ ElectLeaders

class ElectLeaders(TranslationBase):
    api_key = protocol.ApiKey.ELECT_LEADERS
    versions = (0, 2)

    def request(self, ctx, header, request):
        kind = request.election_type if header.api_version >= 1 else \
            protocol.ELECTION_PREFERRED
        partitions = None
        if request.topic_partitions is not None:
            partitions = list(dict.fromkeys(
                (t.topic, p) for t in request.topic_partitions for p in t.partitions))
            partitions = [list(tp) for tp in partitions]
        return NativeCall(protocol.ApiKey.ELECT_LEADERS, {
            "election_type": kind, "partitions": partitions,
            "timeout_ms": request.timeout_ms})

    def response(self, ctx, header, request, body, frames):
        # v0 has no top-level error code (the partitions carry them).
        code = body.get("error", 0) if header.api_version >= 1 else 0
        return ElectLeadersResponse(throttle_time_ms=0, error_code=code,
                                    replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=topic, partition_result=[
                ElectLeadersResponse.PartitionResult(partition_id=p, error_code=code,
                                                     error_message=message)
                for p, code, message in entries])
            for topic, entries in by_topic(body.get("partitions", [])).items()])

    def error(self, ctx, header, request, code, message):
        return ElectLeadersResponse(throttle_time_ms=0,
                                    error_code=code if header.api_version >= 1 else 0,
                                    replica_election_results=[
            ElectLeadersResponse.ReplicaElectionResult(topic=t.topic, partition_result=[
                ElectLeadersResponse.PartitionResult(partition_id=p, error_code=code,
                                                     error_message=message)
                for p in t.partitions])
            for t in request.topic_partitions or ()])


# ------------------------------------------------------------------ reassignments

class AlterPartitionReassignments(TranslationBase):
    api_key = protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS
    versions = (0, 0)

    def request(self, ctx, header, request):
        partitions = [[t.name, p.partition_index,
                       None if p.replicas is None else list(p.replicas)]
                      for t in request.topics for p in t.partitions]
        return NativeCall(protocol.ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                          {"partitions": partitions, "timeout_ms": request.timeout_ms})

    def response(self, ctx, header, request, body, frames):
        R = AlterPartitionReassignmentsResponse
        return R(throttle_time_ms=0, error_code=body.get("error", 0), error_message=None,
                 responses=[R.ReassignableTopicResponse(name=topic, partitions=[
                     R.ReassignablePartitionResponse(partition_index=p, error_code=code,
                                                     error_message=message)
                     for p, code, message in entries])
                     for topic, entries in by_topic(body.get("partitions", [])).items()])


class ListPartitionReassignments(TranslationBase):
    api_key = protocol.ApiKey.LIST_PARTITION_REASSIGNMENTS
    versions = (0, 0)

    def request(self, ctx, header, request):
        partitions = None if request.topics is None else \
            [[t.name, p] for t in request.topics for p in t.partition_indexes]
        return NativeCall(protocol.ApiKey.LIST_PARTITION_REASSIGNMENTS,
                          {"partitions": partitions})

    def response(self, ctx, header, request, body, frames):
        R = ListPartitionReassignmentsResponse
        return R(throttle_time_ms=0, error_code=body.get("error", 0), error_message=None,
                 topics=[R.OngoingTopicReassignment(name=topic, partitions=[
                     R.OngoingPartitionReassignment(partition_index=p, replicas=replicas,
                                                    adding_replicas=adding,
                                                    removing_replicas=removing)
                     for p, replicas, adding, removing in entries])
                     for topic, entries in by_topic(body.get("partitions", [])).items()])


register(DescribeCluster())
register(ElectLeaders())
register(AlterPartitionReassignments())
register(ListPartitionReassignments())
