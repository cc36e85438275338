"""Shared by the crash test and its child process."""
from shm.config import LogConfig

TOPIC = "crash"
PARTITION = 0
BROKER_ID = 7
# Small segments and an explicit flush policy: kills land in rolls, flushes and appends.
CONFIG = LogConfig(segment_bytes=64 * 1024, index_interval_bytes=1024,
                   flush_interval_messages=500)
