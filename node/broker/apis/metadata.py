"""Metadata: brokers and partition leaders as the controller last told this broker
(UpdateMetadata, held in ``node.broker.metadata_cache``)."""
from __future__ import annotations

from node.wire import protocol


def handle_metadata(apis, identity, request: protocol.Request) -> None:
    topics = protocol.field(request.body, "topics", list, optional=True)
    if topics is not None and not all(isinstance(t, str) for t in topics):
        raise protocol.ProtocolError("topics must be a list of names")
    apis.send_response(identity, request.correlation_id, request.api_key,
                       apis.metadata.metadata_response(topics))
