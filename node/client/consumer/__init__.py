"""The consumer: manual assignment or a group, fetch pipelining, leader following. One
thread.

Offers ``Consumer`` (kafka-python-like) and what it returns or raises: ``FetchedBatch``
(``poll_batches``), ``OffsetAndTimestamp`` (``offsets_for_times``),
``LogTruncationException``, ``DeserializationError``, ``NoOffsetForPartitionError``.
Its modules, cut as Kafka's consumer (one class, ``Consumer``, made of the mixins):

    api.py             Consumer: configs, poll / poll_batches, position, close
    subscription.py    SubscriptionState: assignment, positions with their leader
                       epochs, seek, reset and validation states
    fetcher.py         Fetcher: Fetch requests, buffered batches, leader following
    offset_fetcher.py  OffsetFetcher: ListOffsets for resets and offset look-ups
    validation.py      KIP-320 position validation (OffsetForLeaderEpoch); the pure
                       decision is node.client.offset_validation
    membership.py      the consumer's side of a group (node.client.group): subscribe,
                       commit, committed, rebalance hooks

Groups (``group_id=``, then ``subscribe``), of two kinds (``group_protocol``):

- ``"consumer"`` (the default; Kafka 4's name): the brokers' group coordinator with
  KIP-848's protocol (``node.client.broker_group``, its member decided by
  ``node.core.consumer_member``): FindCoordinator, then ConsumerGroupHeartbeat; the
  coordinator assigns, the member revokes before it takes new partitions; offsets are
  committed to the coordinator (``__consumer_offsets``).
- ``"classic"``: the same coordinator with the classic protocol (JoinGroup, SyncGroup,
  Heartbeat every ``heartbeat_interval_ms``, LeaveGroup; the group's leader assigns
  with the range assignor; eager rebalancing; ``node.client.classic_group``).
- ``"zookeeper"``: the Kafka paper's consumer groups, in the coordinator as Kafka 0.8
  kept them (``node.client.group``, its rebalance decided by ``node.core.group``). The
  coordinator's address comes from ``zookeeper_connect`` or, as a Kafka client would
  ask for a broker config, from a broker's DescribeConfigs (``zookeeper.connect``).

Either way the group's work runs inside ``poll``/``commit``/``close``, in the caller's
thread; a member that stops polling holds its partitions until its session ends
(Kafka 0.8's consumer rebalanced on a thread of its own; Kafka 4's heartbeats from a
background thread). Committed offsets are the next offsets to read; a member that
joins reads from them, or from ``auto_offset_reset`` where there are none; with
``enable_auto_commit`` the positions are committed every ``auto_commit_interval_ms``,
before each revocation and on ``close``, so a record is never skipped: what a member
had not committed when it died is read again by the next owner (at least once).
``close`` leaves the group at once (KIP-848: a heartbeat with member epoch -1). With
``group_instance_id`` (KIP-345, the brokers' groups) a member is static: ``close``
keeps its place (epoch -2; no LeaveGroup in a classic group) and the same instance
coming back within its session takes its partitions again without a rebalance.

Theory of operation (Kafka's Fetcher, without groups):

- Per assigned partition the consumer keeps ``position`` (the next offset ``poll``
  returns) and ``fetch_offset`` (the next offset to ask for: position plus what is
  buffered). A partition whose position is unknown (just assigned, ``seek_to_*``, or
  ErrorCode.OFFSET_OUT_OF_RANGE) is reset with ListOffsets (earliest -2 / latest -1) first.
- At most one Fetch is in flight per leader broker; it carries every fetchable
  partition that broker leads, with ``current_leader_epoch`` from metadata (KIP-320),
  so a stale leader answers FENCED_LEADER_EPOCH instead of serving a diverged log.
  The next Fetch goes out as soon as the previous answer is buffered — before the
  records are handed to the caller — so fetching overlaps processing.
- A response entry is applied only if the partition is still assigned and its
  fetch_offset is still the one asked for (a ``seek`` in between makes it stale).
- NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
  UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE and lost connections refresh
  metadata (after ``retry_backoff_ms``) and fetch from the new leader; ErrorCode.OFFSET_OUT_OF_RANGE
  applies ``auto_offset_reset`` ("earliest", "latest", or "none" = raise).
- KIP-320: the position carries the leader epoch of the last batch consumed and the
  leader it is known good with. When metadata names another leader or a newer leader
  epoch, what was fetched from the old leader is dropped and the partition awaits
  validation: no Fetch until the new leader has answered OffsetForLeaderEpoch (current
  leader epoch, last consumed epoch) and ``node.client.offset_validation`` has judged
  the answer. A log truncated beneath the position (an unclean election, a deposed
  leader's tail) moves the position back to the first offset known to diverge, logged
  as Kafka's "Truncation detected for partition ..."; with ``auto_offset_reset="none"``
  every ``poll`` raises LogTruncationException (an OffsetOutOfRangeError carrying the
  divergent offsets) until the caller seeks. Failed validations refresh metadata and
  are retried. A position set by ``seek`` or a reset has no epoch and is not validated
  (as in Kafka; committed offsets carry no epoch here).
- A fetched region may start inside a batch (records before the position are skipped)
  and may end with a partial batch (ignored; fetched again).
- A corrupt batch (bad header, wrong CRC, or no whole batch at the fetch offset although
  the broker always sends at least one) is not skipped silently: the valid batches before
  it are delivered first, then ``poll`` raises CorruptMessageError naming the partition
  and the offset, and keeps raising until the caller seeks past it (Kafka's behaviour).

``poll()`` returns ConsumerRecord tuples (per-record Python work), each with its record
headers as Kafka's clients give them (``headers``: a tuple of (str, bytes or None) pairs,
() when the record has none; decoded only for batches that carry a headers column);
``poll_batches()`` returns the parsed batches themselves (``FetchedBatch``), for the
perf tool (``batch.record_headers()`` decodes a batch's headers).

``key_deserializer`` / ``value_deserializer`` (kafka-python's names) are applied by
``poll``. A record that cannot be deserialized is not skipped: the records before it are
returned, the partition's position stays on it, and the next ``poll`` raises the
deserializer's error naming the partition and offset until the caller seeks past it
(Kafka's RecordDeserializationException).
"""
from node.client.consumer.api import Consumer, DeserializationError
from node.client.consumer.fetcher import FETCH_MAX_BYTES, FETCH_SUSPECT_MS, FetchedBatch
from node.client.consumer.membership import GROUP_STEP_MS, NoOffsetForPartitionError
from node.client.consumer.offset_fetcher import OffsetAndTimestamp
from node.client.consumer.validation import LogTruncationException

__all__ = ["Consumer", "FetchedBatch", "OffsetAndTimestamp", "LogTruncationException",
           "DeserializationError", "NoOffsetForPartitionError", "FETCH_MAX_BYTES",
           "FETCH_SUSPECT_MS", "GROUP_STEP_MS"]
