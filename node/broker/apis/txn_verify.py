"""KIP-890 part 1's verification, the I/O shell (Kafka's AddPartitionsToTxnManager): a
partition leader asks the transaction coordinator of a Produce's transactional id
whether the partitions about to get their first transactional batch are in the
producer's transaction (AddPartitionsToTxn, ``verify_only``), and the Produce waits for
the answer. The decisions are ``node.broker.apis.txn_rules``'.

The coordinator is found as Kafka's broker finds it: the leader of the transactional
id's ``__transaction_state`` partition (Kafka's ``abs(hashCode(id)) % partitions``, the
partition count from the metadata cache) in this broker's metadata cache; no topic or
no leader is COORDINATOR_NOT_AVAILABLE (the producer retries: NOT_ENOUGH_REPLICAS).
The request goes over the broker's inter-broker client (``apis.send_to_broker``), to
itself too when it is the coordinator.
"""
from __future__ import annotations

import logging
from typing import Callable

from node.broker.apis import txn_rules
from node.core.groups.hashing import partition_for
from node.wire.errors import ErrorCode

logger = logging.getLogger("node.broker.server")

TRANSACTION_STATE_TOPIC = "__transaction_state"     # Kafka's name
ADD_PARTITIONS_TO_TXN = 24                           # Kafka's API key


def coordinator_endpoint(metadata, transactional_id: str) -> str | None:
    """The native endpoint of the transactional id's coordinator, or None."""
    partitions = metadata.topics.get(TRANSACTION_STATE_TOPIC)
    if not partitions:
        return None
    known = partitions.get(partition_for(transactional_id, len(partitions)))
    if known is None or known.leader < 0:
        return None
    return metadata.endpoint(known.leader)


def verify(apis, transactional_id: str, producer: tuple[int, int], keys,
           done: Callable[[dict], None]) -> None:
    """Ask; ``done({key: error code})`` later, on the loop, always exactly once."""
    keys = list(keys)
    endpoint = coordinator_endpoint(apis.metadata, transactional_id)
    send = getattr(apis, "send_to_broker", None)
    if endpoint is None or send is None:
        apis.loop.post(lambda: done({k: ErrorCode.COORDINATOR_NOT_AVAILABLE for k in keys}))
        return
    body = txn_rules.verify_body(transactional_id, producer[0], producer[1], keys)

    def answered(response) -> None:
        outcome = txn_rules.verify_outcome(None if response is None else response.body,
                                           transactional_id, keys)
        if any(outcome.values()):
            logger.debug("verification of %s for %r: %s", keys, transactional_id, outcome)
        done(outcome)

    send(endpoint, ADD_PARTITIONS_TO_TXN, body, answered)
