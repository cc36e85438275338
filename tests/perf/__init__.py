"""Real-process tests of the perf tools (node.perf) and bench.perf.zmq_limits."""
