"""Benchmarks, workloads, chaos and PySpark analysis."""
