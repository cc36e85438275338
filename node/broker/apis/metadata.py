"""Metadata and DescribeCluster: brokers and partition leaders as the controller last
told this broker (UpdateMetadata, held in ``node.broker.metadata_cache``)."""
from __future__ import annotations

from node.wire import protocol


def handle_metadata(apis, identity, request: protocol.Request) -> None:
    topics = protocol.field(request.body, "topics", list, optional=True)
    if topics is not None and not all(isinstance(t, str) for t in topics):
        raise protocol.ProtocolError("topics must be a list of names")
    apis.send_response(identity, request.correlation_id, request.api_key,
                       apis.metadata.metadata_response(topics))


def handle_describe_cluster(apis, identity, request: protocol.Request) -> None:
    """DescribeCluster (KIP-700): the live brokers and the controller as the controller
    last told this broker, and the cluster id."""
    md = apis.metadata
    apis.send_response(identity, request.correlation_id, request.api_key, {
        "error": 0, "cluster_id": apis.cluster_id or "", "controller_id": md.controller_id,
        "brokers": [[i, h, p, r] for i, (h, p, r) in sorted(md.brokers.items())]})
