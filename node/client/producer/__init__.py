"""The producer: ``send()`` appends to a per-partition buffer, an I/O thread does the rest.

Offers ``Producer`` (kafka-python-like) and the futures it returns,
``FutureRecordMetadata`` / ``FutureBatchMetadata``. Its modules, cut as Kafka's:

    api.py          the Producer: configs, send / send_many / send_batch, flush, close
    accumulator.py  RecordAccumulator: per-partition open batches, and their encoding
    sender.py       Sender: the I/O thread's turns (queues, requests, retries, idempotence)
    transactions.py TransactionManager: a transactional producer's state and coordinator
                    requests (``transactional_id=``; kafka-python's init_transactions,
                    begin_transaction, send_offsets_to_transaction, commit_transaction,
                    abort_transaction)
    txn_requests.py its requests (Kafka's TxnRequestHandlers), states and TxnResult
    futures.py      ProduceRequestResult and the futures of records and batches

The one record-batch encoder is ``shm.batch`` (``build_batch``, and its struct fast
path for the few records of a latency path, ``encode_small_batch``).

Theory of operation (Kafka's RecordAccumulator + Sender, simplified):

- ``send()`` runs in the caller's thread and does as little as possible: pick the
  partition (explicit, murmur2 of the key, or the sticky partition of KIP-480), append
  value/key/timestamp (and headers) to that partition's open buffer, return a future
  that points at (buffer, index). No encoding happens here.
- The I/O thread owns the sockets (a ``Network``). Each turn it takes the buffers that
  are ready (``linger_ms`` elapsed, ``batch_size`` reached, or a flush) and encodes
  each into ONE record batch (``shm.batch``), queues the batches per
  partition, and sends one Produce request per leader broker carrying one frame per
  partition (all of that partition's queued batches back to back).
- Ordering: a partition with a request in flight is muted (as Kafka does when it must
  keep order) — its next batches wait and then travel together in the next request,
  which is also what makes batches big under load. ``max_in_flight_requests_per_connection``
  bounds the requests in flight per broker.
- Responses complete futures: record i of a batch gets offset base_offset + i.
  Retriable errors (ErrorCode.NOT_LEADER_OR_FOLLOWER, LEADER_NOT_AVAILABLE,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT, a lost
  connection, ...) put the batches back at the front of their partition's queue after
  ``retry_backoff_ms`` and refresh metadata, up to ``retries`` attempts and within
  ``delivery_timeout_ms`` of the batch's creation; then the last error completes them.
- A lost connection fails its requests at once (``node.client.network.Network``). A leader
  that keeps its connection but does not answer (SIGSTOP, a partition) is suspected
  after 1 s: metadata is checked, and if every partition of the request has a newer
  leader epoch, the request is abandoned and retried at the new leader instead of
  waiting for ``request_timeout_ms``. Backoffs after leadership errors end as soon as
  fresh metadata shows a newer leader epoch.
- acks=0: nothing comes back; futures complete when the request is handed to ZeroMQ,
  with offset -1 (as Kafka).

``send_many(topic, values, ...)`` is the bulk path for the perf tool: it encodes
batches of up to ``batch_size`` bytes directly from a list / 2-D uint8 numpy array /
pyarrow binary array (no per-record Python work) and returns one future per batch.

Idempotence (KIP-98 without transactions; ``enable_idempotence``, on by default with
acks=all as in Kafka 3, refused with acks 0/1): the producer gets an id and epoch from
a broker (InitProducerId) before its first send, and stamps each batch, when it is
first sent, with them and the partition's next sequence number (``stamp_producer``;
retries keep them). One request in flight per partition (the muting above), so
sequences reach the leader in order; a retry resends exactly the batches first sent
together (one frame), and the leader answers a retry of appended batches with their
original offsets instead of writing them twice: it remembers a producer's last five
runs of batches appended back to back (``shm.producer_state``), so a frame of any
length is recognised. After a batch fails for good, or the leader reports a sequence gap
or an unknown producer, the producer waits for its requests in flight, takes the next
epoch and numbers the unsent batches from 0 again (KIP-360).

Record headers (``send(..., headers=[("k", b"v"), ("k", None)])``, Kafka's shape; a dict
too): checked in ``send``, written by the encoder into ``shm.batch``'s headers column
(``shm.record_headers``, Kafka's own header encoding), which a batch has only when one
of its records has headers.

``key_serializer`` / ``value_serializer`` (kafka-python's names) turn what ``send`` is
given into bytes (e.g. ``node.client.avro.AvroSerializer``); ``send_many`` takes bytes.
"""
from node.client.producer.accumulator import RECORD_OVERHEAD_BYTES
from node.client.producer.api import Producer
from node.client.producer.futures import FutureBatchMetadata, FutureRecordMetadata

__all__ = ["Producer", "FutureRecordMetadata", "FutureBatchMetadata", "RECORD_OVERHEAD_BYTES"]
