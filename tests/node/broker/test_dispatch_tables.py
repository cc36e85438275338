"""The broker's two dispatch tables: API key -> request handler (node.broker.apis, as
Kafka's KafkaApis) and effect type -> effect handler (the replica manager)."""
from __future__ import annotations

import pytest

from node.broker.apis.admin import ADMIN_API_KEYS
from node.broker.apis import HANDLERS
from node.broker.apis import control, fetch, offsets, produce
from node.broker.loop import EventLoop
from node.broker.replica_manager import ReplicaManager
from node.broker.txn.handlers import TXN_HANDLERS
from node.core.replication import CompleteProduce, SetHighWatermark
from node.wire import protocol


def test_every_api_key_has_one_handler_in_one_table():
    # ApiVersions is answered before the version check (in any version).
    assert set(HANDLERS) == set(protocol.ApiKey) - {protocol.ApiKey.API_VERSIONS}
    assert HANDLERS[protocol.ApiKey.PRODUCE] is produce.handle_produce
    assert HANDLERS[protocol.ApiKey.FETCH] is fetch.handle_fetch
    assert HANDLERS[protocol.ApiKey.LIST_OFFSETS] is offsets.handle_list_offsets
    assert HANDLERS[protocol.ApiKey.LEADER_AND_ISR] is control.handle_leader_and_isr
    # InitProducerId is the transaction coordinator's (the admin path without a
    # transactional id).
    assert len({HANDLERS[k] for k in ADMIN_API_KEYS - {protocol.ApiKey.INIT_PRODUCER_ID}}) == 1
    assert HANDLERS[protocol.ApiKey.INIT_PRODUCER_ID] is TXN_HANDLERS[
        protocol.ApiKey.INIT_PRODUCER_ID]


class _Log:
    high_watermark = 0

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = offset


class _Part:
    """What apply_effects needs of a partition for the effects below."""
    key = ("t", 0)

    def __init__(self) -> None:
        self.log = _Log()


@pytest.fixture
def manager():
    loop = EventLoop()
    seen = []
    replicas = ReplicaManager(
        broker_id=0, config=None, loop=loop, zk=None, metadata=None,
        on_produce_complete=lambda part, effect: seen.append(("produce", part, effect)),
        on_high_watermark=lambda part: seen.append(("hw", part)))
    yield replicas, seen
    loop.close()


def test_effects_go_to_their_handlers_in_order(manager):
    replicas, seen = manager
    part = _Part()
    done = CompleteProduce(request_id=7, error=0, base_offset=3)
    replicas.apply_effects(part, [SetHighWatermark(5), done])
    assert seen == [("hw", part), ("produce", part, done)]
    assert part.log.high_watermark == 5
    assert replicas.dirty == {part}


def test_an_unknown_effect_is_a_bug(manager):
    replicas, _ = manager
    with pytest.raises(AssertionError, match="unknown effect"):
        replicas.apply_effects(_Part(), [object()])
