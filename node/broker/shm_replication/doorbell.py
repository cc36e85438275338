"""Doorbells: one FIFO per broker in /dev/shm (``/mk-<cluster>-bell-<broker>``).

The broker reads its own (opened read-write and non-blocking, registered with the loop's
poller: a byte wakes the loop directly, no thread in between); any process of the host
rings another broker's by writing a byte. An eventfd would do the same but cannot be
opened by name from an unrelated process; a POSIX semaphore cannot be polled with the
loop's sockets (a waiting thread would add a wake-up). A full FIFO means the bell is
already rung; a bell whose broker died (no reader) or was replaced by a restart fails
the write, and the ringer opens it again later. ``names.cleanup_cluster`` removes
leftovers like every other object of the cluster.
"""
from __future__ import annotations

import errno
import os
import stat

from shm import names

DRAIN_BYTES = 65536


def bell_path(cluster_id: str, broker_id: int) -> str:
    return os.path.join(names.SHM_DIR, names.shm_name(cluster_id, "bell", broker_id).lstrip("/"))


class Doorbell:
    """This broker's bell (the reading end)."""

    def __init__(self, cluster_id: str, broker_id: int) -> None:
        self.path = bell_path(cluster_id, broker_id)
        try:
            os.unlink(self.path)       # left by an earlier run of this broker
        except FileNotFoundError:
            pass
        os.mkfifo(self.path, 0o600)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.inode = os.fstat(self.fd).st_ino

    def drain(self) -> int:
        """Bytes read (any number of rings count as one wake-up)."""
        total = 0
        while True:
            try:
                got = os.read(self.fd, DRAIN_BYTES)
            except BlockingIOError:
                return total
            total += len(got)
            if len(got) < DRAIN_BYTES:
                return total

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        try:
            if os.stat(self.path).st_ino == self.inode:
                os.unlink(self.path)
        except FileNotFoundError:
            pass


class Ringer:
    """Rings other brokers' bells; keeps one write descriptor per bell."""

    def __init__(self, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self._fds: dict[int, int] = {}

    def ring(self, broker_id: int) -> bool:
        """False if the bell is not there (its broker is gone, or uses Fetch only)."""
        fd = self._fds.get(broker_id)
        if fd is None:
            fd = self._open(broker_id)
            if fd is None:
                return False
        try:
            os.write(fd, b"\1")
            return True
        except BlockingIOError:
            return True                   # full: rung already
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.EBADF):
                raise
            self.forget(broker_id)        # its reader is gone: open again next time
            return False

    def _open(self, broker_id: int) -> int | None:
        path = bell_path(self.cluster_id, broker_id)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ENXIO):    # none, or nobody reads it
                return None
            raise
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        self._fds[broker_id] = fd
        return fd

    def forget(self, broker_id: int) -> None:
        fd = self._fds.pop(broker_id, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for broker_id in list(self._fds):
            self.forget(broker_id)
