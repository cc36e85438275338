"""Real-process tests of the perf tools (node.perf) and bench.limits."""
