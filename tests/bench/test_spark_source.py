"""bench.analysis.spark_source's pure parts: the rounds' summary and local[N]'s cores."""
from __future__ import annotations

import os

from bench.analysis.spark_source import local_cores, summary


def test_summary_takes_medians_and_the_median_of_the_rounds_ratios():
    seconds = {"local": [2.0, 9.0, 1.0], "parquet": [1.0, 3.0, 2.0]}
    out = summary(seconds, 1000)
    assert out["local"]["seconds"] == 2.0 and out["local"]["records_per_s"] == 500
    assert out["parquet"]["seconds"] == 2.0 and "of_parquet" not in out["parquet"]
    # round by round: 1/2, 3/9, 2/1 -> median 0.5 (not 2.0 / 2.0)
    assert out["local"]["of_parquet"] == 0.5
    assert out["local"]["rounds"] == [2.0, 9.0, 1.0]


def test_local_cores():
    assert local_cores("local[2]") == 2
    assert local_cores("local") == 1
    assert local_cores("local[*]") == (os.cpu_count() or 1)
    assert local_cores("spark://h:7077") == 0
    assert local_cores("local-cluster[2,1,1024]") == 0


def test_the_ceiling_batch_has_the_sources_columns_and_100_byte_values():
    import pyarrow as pa
    from bench.analysis.spark_source import RECORD_BYTES, ceiling_batch
    batch = ceiling_batch(10)
    # node.spark.source.SCHEMA as Spark's Arrow schema (what a source's batches must be)
    assert batch.schema.equals(pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
        ("partition", pa.int32()), ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]))
    assert batch.num_rows == 10 and batch.column("key").null_count == 10
    assert {len(v) for v in batch.column("value").to_pylist()} == {RECORD_BYTES}
