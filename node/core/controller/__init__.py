"""The controller: a pure core (no coordinator client, no sockets, no clock).

One broker at a time holds the ephemeral ``/controller`` znode and runs this core, as
Kafka's ZooKeeper-mode ``KafkaController`` (with its partition and replica state
machines). ``node.broker.controller_runner.ControllerRunner`` feeds it events and performs its
effects; a seeded simulator in tests can do the same.

What it offers (every name below is importable from this package,
``from node.core import controller``): ``Controller`` (``step(event) ->
list[Effect]``), its events and effects, ``ControllerConfig``, ``Broker``,
``TopicSnapshot`` and the election rules. Cut along the seams of Kafka's controller;
each part's rules open its module:

    events.py           events, effects, configuration, brokers and topics, limits
    elections.py        the election rules, pure functions (PartitionLeaderElectionAlgorithms)
    core.py             Controller: __init__, step and the handler table, what it knows,
                        the state writes and their invariants, the ZkOps/SendRequest plumbing
    broker_requests.py  LeaderAndIsr, UpdateMetadata, StopReplica (ControllerBrokerRequestBatch)
    failover.py         failover, broker failure and start-up, broker epochs, lost and
                        refused replicas, the ELR, the reconciling election
    recovery.py         unclean recovery (KIP-966)
    topics.py           new topics and partitions, topic configs, ISR change notifications
    rebalance.py        requested elections and the automatic leader rebalance
    shutdown.py         controlled shutdown
    reassignment.py     partition reassignment
    deletion.py         topic deletion (TopicDeletionManager)

The parts are mixins of ``Controller``, which holds all the state; they import
``events`` and ``elections`` only, never each other or ``core``.

Driving it without a coordinator (a simulator): keep a dict path -> (data, version),
answer each ZkOps op by op as ZooKeeper would (``tests/node/core/controller_harness.py``
does, and shows the loop), deliver SendRequests to simulated brokers in order per
broker, and feed BrokersChanged / IsrChanged / Tick as the simulated world changes.
"""
from node.core.controller import elections
from node.core.controller.core import Controller
from node.core.controller.elections import (elect_controlled_shutdown, elect_offline,
                                            elect_preferred, elect_reassigned)
from node.core.controller.events import (
    DELETE_STOP_REPLICA_ATTEMPTS_MAX, FIRST_REBALANCE_CHECK_DELAY_MS, LEADER_DURING_DELETE,
    NO_LEADER, STATE_WRITE_ATTEMPTS_MAX, BecomeController, Broker, BrokerResponse,
    BrokersChanged, ControlledShutdownRequested, ControllerConfig, Effect, ElectionRequested,
    Event, IsrChanged, LogLine, ReassignmentRequested, ReplicasOffline, ReplyControlledShutdown,
    Resign, SendRequest, Tick, TopicChanged, TopicConfigChanged, TopicDeletionRequested,
    TopicPartition, TopicRemoved, TopicSnapshot, ZkCreate, ZkDelete, ZkOp, ZkOps, ZkOpsDone,
    ZkResult, ZkSetData)

__all__ = [
    "elections", "Controller",
    "elect_controlled_shutdown", "elect_offline", "elect_preferred", "elect_reassigned",
    "DELETE_STOP_REPLICA_ATTEMPTS_MAX", "FIRST_REBALANCE_CHECK_DELAY_MS", "LEADER_DURING_DELETE",
    "NO_LEADER", "STATE_WRITE_ATTEMPTS_MAX", "BecomeController", "Broker", "BrokerResponse",
    "BrokersChanged", "ControlledShutdownRequested", "ControllerConfig", "Effect",
    "ElectionRequested", "Event", "IsrChanged", "LogLine", "ReassignmentRequested",
    "ReplicasOffline", "ReplyControlledShutdown", "Resign", "SendRequest", "Tick",
    "TopicChanged", "TopicConfigChanged", "TopicDeletionRequested", "TopicPartition",
    "TopicRemoved", "TopicSnapshot", "ZkCreate", "ZkDelete", "ZkOp", "ZkOps", "ZkOpsDone",
    "ZkResult", "ZkSetData",
]
