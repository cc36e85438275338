"""DescribeLogDirs and DeleteRecords through the native handlers
(``node.broker.apis.log_dirs`` and ``delete_records``).

- DescribeLogDirs: this broker's log directories (a client asks each broker), each
  replica's size and offset lag; an offline directory is KAFKA_STORAGE_ERROR; v4's total
  and usable bytes come from the file system.
- DeleteRecords: sent by clients to each partition's leader, which moves the log start
  offset (followers follow). -1 is the high watermark; past the high watermark is
  OFFSET_OUT_OF_RANGE; low_watermark is the leader's new log start offset.
"""
from __future__ import annotations

from node.kafka.protocol.messages import DeleteRecordsResponse, DescribeLogDirsResponse
from node.kafka.translate.registry import NativeCall, TranslationBase, register
from node.kafka.translate.admin_cluster import by_topic
from node.wire import protocol


class DescribeLogDirs(TranslationBase):
    api_key = protocol.ApiKey.DESCRIBE_LOG_DIRS
    versions = (0, 4)

    def request(self, ctx, header, request):
        partitions = None if request.topics is None else \
            [[t.topic, p] for t in request.topics for p in t.partitions]
        return NativeCall(protocol.ApiKey.DESCRIBE_LOG_DIRS, {"partitions": partitions})

    def response(self, ctx, header, request, body, frames):
        R = DescribeLogDirsResponse
        results = []
        for path, code, total, usable, entries in body["log_dirs"]:
            results.append(R.DescribeLogDirsResult(
                error_code=code, log_dir=path, total_bytes=total, usable_bytes=usable,
                topics=[R.DescribeLogDirsTopic(name=topic, partitions=[
                    R.DescribeLogDirsPartition(partition_index=p, partition_size=size,
                                               offset_lag=lag, is_future_key=False)
                    for p, size, lag in parts])
                    for topic, parts in by_topic(entries).items()]))
        code = body.get("error", 0) if header.api_version >= 3 else 0   # v3+ only
        return R(throttle_time_ms=0, error_code=code, results=results)


class DeleteRecords(TranslationBase):
    api_key = protocol.ApiKey.DELETE_RECORDS
    versions = (0, 2)

    def request(self, ctx, header, request):
        partitions = [[t.name, p.partition_index, p.offset]
                      for t in request.topics for p in t.partitions]
        return NativeCall(protocol.ApiKey.DELETE_RECORDS,
                          {"partitions": partitions, "timeout_ms": request.timeout_ms})

    def response(self, ctx, header, request, body, frames):
        R = DeleteRecordsResponse
        return R(throttle_time_ms=0, topics=[
            R.DeleteRecordsTopicResult(name=topic, partitions=[
                R.DeleteRecordsPartitionResult(partition_index=p, low_watermark=low,
                                               error_code=code)
                for p, code, low in entries])
            for topic, entries in by_topic(body["partitions"]).items()])

    def error(self, ctx, header, request, code, message):
        R = DeleteRecordsResponse
        return R(throttle_time_ms=0, topics=[
            R.DeleteRecordsTopicResult(name=t.name, partitions=[
                R.DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                               low_watermark=-1, error_code=code)
                for p in t.partitions])
            for t in request.topics])


register(DescribeLogDirs())
register(DeleteRecords())
