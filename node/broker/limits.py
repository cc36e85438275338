"""Every bound of the broker process in one place (the wire format's own limits live in
``node.wire.protocol``, the storage engine's in ``shm.config``)."""
from __future__ import annotations

from node.core.replication import PENDING_PRODUCES_MAX
from node.wire import control
from node.wire import protocol
from shm import board

# Requests taken from the listener per readiness event before timers and posted work run.
RECEIVE_BATCH_MAX = 256
# ZeroMQ queue bounds of the listener (messages); a client that does not read its answers
# loses them beyond this instead of stalling the broker (ROUTER drops at the HWM).
LISTENER_SEND_HWM = 100_000
LISTENER_RECEIVE_HWM = 100_000
# Largest inbound message part ZeroMQ accepts (Kafka's socket.request.max.bytes).
SOCKET_REQUEST_BYTES_MAX = 104_857_600
# A consumer or follower may park a fetch for at most this long (fetch.max.wait.ms).
FETCH_WAIT_MS_MAX = 60_000
PARKED_FETCHES_MAX = 100_000
# Fetches one connection may have parked at once (Kafka serves one request per
# connection at a time); more are answered at once with what there is. A follower has
# one outstanding fetch per leader, a consumer one per broker.
PARKED_FETCHES_PER_CONNECTION_MAX = 16
# Produce requests waiting for acks=all across all partitions: the core's per-partition
# bound, so the broker refuses first and a core never sees more than it accepts.
PENDING_PRODUCE_REQUESTS_MAX = PENDING_PRODUCES_MAX
PRODUCE_TIMEOUT_MS_MAX = 300_000
# Admin answers waiting for the metadata cache (CreateTopics, CreatePartitions,
# DeleteTopics: node.broker.apis.admin_waits), and for at most this long.
ADMIN_WAITS_MAX = 1_000
ADMIN_WAIT_MS_MAX = 300_000
# A changed board row is published this long after the first change (one timer for
# every row changed meanwhile): readers see a replica's state at most this late.
BOARD_PUBLISH_DELAY_MS = 10
# Rows of the replica-state board (partition replicas one broker may host).
BOARD_CAPACITY = 4096
# Traced acks=all writes (bench.perf.latency --breakdown) followed at once; more go untraced.
TRACED_WRITES_MAX = 64
# The cores' tick (replica.lag.time.max.ms / 2 at least, produce timeouts).
TICK_INTERVAL_MS = 50
FLUSH_CHECK_INTERVAL_MS = 1000
# The scrubber (log.scrub.bytes.per.second) runs this often with its share of the rate.
SCRUB_INTERVAL_MS = 100
# ... and verifies at most this many batches per run (~5 us each: a small-batch log is
# scrubbed at 200 batches/s, so the loop never stalls for more than about 0.1 ms).
SCRUB_BATCHES_PER_RUN_MAX = 20
# Waiting for a previous session's /brokers/ids/N to expire, in session timeouts.
OLD_REGISTRATION_WAIT_SESSIONS = 3
OLD_REGISTRATION_POLL_S = 0.1
# A registration in a new session that failed (the coordinator slow to answer) is tried
# again this often while the session is connected (no reconnect may come to ask).
REREGISTER_RETRY_MS = 1000
# An ISR change notification the coordinator refused or lost is created again after this
# long (node.broker.replica_manager.send_isr_changes).
ISR_NOTIFY_RETRY_MS = 500
ZK_START_TIMEOUT_S = 30.0
# A start-up step the coordinator did not answer is tried again after this long, until
# zookeeper.connection.timeout.ms has passed.
STARTUP_COORDINATOR_RETRY_S = 0.25
# Ending the coordinator session on stop waits at most this (an absent coordinator never
# answers the close; the session then expires). Calls made on the loop are bounded by
# node.broker.coordinator.CALL_TIMEOUT_S.
ZK_CLOSE_TIMEOUT_S = 2.0

assert SOCKET_REQUEST_BYTES_MAX >= protocol.BODY_BYTES_MAX
assert TICK_INTERVAL_MS <= 100
assert PENDING_PRODUCE_REQUESTS_MAX <= PENDING_PRODUCES_MAX
assert control.REPLICAS_MAX <= board.REPLICAS_MAX  # a controller request fits the board
