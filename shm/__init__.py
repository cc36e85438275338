"""Storage: record batches, segmented mmap'd logs, shared-memory indexes and board."""
