"""InitProducerId (idempotent producers, KIP-98 without transactions): a new producer id
from this broker process's block, or the next epoch of a given id. With a
``transactional_id`` the request goes to the transaction coordinator instead
(``node.broker.txn.handlers``), which takes its ids from the same block
(``allocate_producer_id``). Blocks of
``PRODUCER_ID_BLOCK_SIZE`` ids are reserved in ``/latest_producer_id_block`` with
conditional writes (Kafka's znode and JSON), so no two brokers hand out one id.
"""
from __future__ import annotations

import json

from kazoo.exceptions import BadVersionError, NoNodeError, NodeExistsError

from node.broker.apis.admin.common import WRITE_ATTEMPTS_MAX
from node.broker.coordinator import CoordinatorUnavailable, GuardedZk
from node.wire.errors import ErrorCode
from node.wire.protocol import ProtocolError

PRODUCER_ID_BLOCK_PATH = "/latest_producer_id_block"
PRODUCER_ID_BLOCK_SIZE = 1000
PRODUCER_EPOCH_MAX = 32767
_producer_ids = {"next": 0, "end": -1}     # this broker process's block: [next, end]


def init_producer_id(body: dict, zk: GuardedZk, config) -> dict:
    pid = body.get("producer_id", -1)
    epoch = body.get("producer_epoch", -1)
    if not isinstance(pid, int) or not isinstance(epoch, int):
        raise ProtocolError("producer_id and producer_epoch must be ints")
    if pid >= 0 and 0 <= epoch < PRODUCER_EPOCH_MAX:
        return {"error": ErrorCode.NONE, "producer_id": pid, "producer_epoch": epoch + 1}
    return {"error": ErrorCode.NONE, "producer_id": allocate_producer_id(zk, config),
            "producer_epoch": 0}


def allocate_producer_id(zk: GuardedZk, config) -> int:
    """A new producer id from this broker process's block (a new block when it is used
    up): idempotent producers' and the transaction coordinator's."""
    if _producer_ids["next"] > _producer_ids["end"]:
        _reserve_producer_ids(zk, config.broker_id)
    pid = _producer_ids["next"]
    _producer_ids["next"] += 1
    return pid


def _reserve_producer_ids(zk: GuardedZk, broker_id: int) -> None:
    for _ in range(WRITE_ATTEMPTS_MAX):
        try:
            data, stat = zk.get(PRODUCER_ID_BLOCK_PATH)
            try:
                start = int(json.loads(data)["block_end"]) + 1
            except (ValueError, KeyError, TypeError):
                raise ProtocolError(f"{PRODUCER_ID_BLOCK_PATH} holds no block: "
                                    f"{data[:100]!r}") from None
            version = stat.version
        except NoNodeError:
            start, version = 0, None
        end = start + PRODUCER_ID_BLOCK_SIZE - 1
        value = json.dumps({"version": 1, "broker": broker_id, "block_start": str(start),
                            "block_end": str(end)}).encode()
        try:
            if version is None:
                zk.create(PRODUCER_ID_BLOCK_PATH, value)
            else:
                zk.set(PRODUCER_ID_BLOCK_PATH, value, version=version)
        except (NodeExistsError, BadVersionError):
            continue       # another broker took this block: read again
        _producer_ids.update(next=start, end=end)
        return
    raise CoordinatorUnavailable(f"could not reserve producer ids in {WRITE_ATTEMPTS_MAX} "
                                 f"attempts (answered as a retriable timeout)")


