"""The codec's speed on the hot path: ``python -m node.kafka.protocol.speed``.

Decoding a ProduceRequest v9 (one partition, a 16 KB records blob) and encoding a
FetchResponse v12 (one partition, a 1 MB records blob, whole and as four views), median
of many runs, in microseconds, next to a plain 1 MB copy for scale.
"""

import statistics
import sys
import timeit

from .codec import RequestHeader, decode_request, encode_request, encode_response
from .messages import FetchResponse, ProduceRequest

PRODUCE_RECORDS_BYTES = 16 * 1024
FETCH_RECORDS_BYTES = 1024 * 1024


def median_us(fn, runs: int, per_run: int = 1) -> float:
    times = timeit.repeat(fn, number=per_run, repeat=runs)
    return statistics.median(times) / per_run * 1e6


def fetch_response(records) -> FetchResponse:
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="topic", partitions=[FetchResponse.PartitionData(
            partition_index=0, high_watermark=10, last_stable_offset=10, log_start_offset=0,
            records=records)])])


def measure(runs: int = 2000) -> dict[str, float]:
    produce = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name="topic", partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=b"x" * PRODUCE_RECORDS_BYTES)])])
    payload = encode_request(RequestHeader(0, 9, 1, "rdkafka"), produce)[4:]
    blob = b"y" * FETCH_RECORDS_BYTES
    quarter = FETCH_RECORDS_BYTES // 4
    views = [memoryview(blob)[i * quarter:(i + 1) * quarter] for i in range(4)]
    fetch_header = RequestHeader(1, 12, 1, "rdkafka")
    whole, pieces = fetch_response(blob), fetch_response(views)
    return {
        "decode ProduceRequest v9, 16 KB records":
            median_us(lambda: decode_request(payload), runs, 10),
        "encode FetchResponse v12, 1 MB records":
            median_us(lambda: encode_response(fetch_header, whole), runs),
        "encode FetchResponse v12, 1 MB as 4 views":
            median_us(lambda: encode_response(fetch_header, pieces), runs),
        "copy 1 MB (for scale)": median_us(lambda: bytes(bytearray(blob)), runs),
    }


def main() -> int:
    for name, us in measure().items():
        print(f"{us:10.2f} us  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
