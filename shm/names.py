"""Shared-memory names and lifecycle: one place that knows what we put in /dev/shm.

Rules:
- Every POSIX shared-memory object this project creates is named
  ``/mk-<cluster_id>-<part>-<part>...``. The cluster id is ``[A-Za-z0-9_]`` only (no
  ``-``), so ``mk-c1-`` can never be a prefix of another cluster's names.
- ``cleanup_cluster(cluster_id)`` unlinks every object of a cluster; the supervisor calls
  it on ``cluster down`` and the test suite fails if a test leaves one behind.
- ``SharedArray`` maps one object as a numpy array. Creating fails if the name exists
  (``exists_ok=False``) so two writers never share an object by accident.
"""
from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass

import numpy as np
import posix_ipc

PREFIX = "mk-"
SHM_DIR = "/dev/shm"
NAME_BYTES_MAX = 240  # NAME_MAX is 255 on Linux; leave room for the leading '/'.
_CLUSTER_ID = re.compile(r"^[A-Za-z0-9_]{1,40}$")
_PART = re.compile(r"^[A-Za-z0-9_.-]{1,120}$")
TOPIC_NAME_CHARS_MAX = 249  # Kafka's limit (Topic.MAX_NAME_LENGTH)
_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")


class SharedMemoryError(Exception):
    """A shared-memory object is missing, malformed or of the wrong size."""


def topic_name_error(name) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's Topic.validate, its messages), or
    None. The one topic-name rule of the project: names become directories and
    shared-memory names here, so a name like ``../x`` must never pass."""
    if not isinstance(name, str) or not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > TOPIC_NAME_CHARS_MAX:
        return (f"Topic name is illegal, it can't be longer than {TOPIC_NAME_CHARS_MAX} "
                f"characters, topic name: {name}")
    if not _TOPIC_CHARS.match(name):
        return (f"Topic name \"{name}\" is illegal, it contains a character other than "
                f"ASCII alphanumerics, '.', '_' and '-'")
    return None


def check_cluster_id(cluster_id: str) -> str:
    if not isinstance(cluster_id, str) or not _CLUSTER_ID.match(cluster_id):
        raise ValueError(
            f"cluster id {cluster_id!r} must be 1-40 characters of [A-Za-z0-9_] (no '-')")
    return cluster_id


def shm_name(cluster_id: str, *parts: object) -> str:
    """``/mk-<cluster>-<parts joined by '-'>``; parts are [A-Za-z0-9_.-] (Kafka topic characters)."""
    check_cluster_id(cluster_id)
    texts = [str(p) for p in parts]
    for text in texts:
        if not _PART.match(text):
            raise ValueError(f"shared-memory name part {text!r} must be [A-Za-z0-9_.-] (1-120 chars)")
    name = "/" + PREFIX + cluster_id + "-" + "-".join(texts)
    if len(name) > NAME_BYTES_MAX:
        raise ValueError(f"shared-memory name too long ({len(name)} > {NAME_BYTES_MAX}): {name}")
    return name


def cluster_objects(cluster_id: str) -> list[str]:
    """Names (with the leading '/') of every shared-memory object of this cluster."""
    check_cluster_id(cluster_id)
    head = PREFIX + cluster_id + "-"
    try:
        entries = os.listdir(SHM_DIR)
    except FileNotFoundError:
        return []
    return sorted("/" + e for e in entries if e.startswith(head))


def unlink(name: str) -> bool:
    """Unlink one object; False if it was already gone."""
    try:
        posix_ipc.unlink_shared_memory(name)
        return True
    except posix_ipc.ExistentialError:
        return False


def cleanup_cluster(cluster_id: str) -> int:
    """Unlink every shared-memory object of ``cluster_id``; returns how many."""
    return sum(unlink(name) for name in cluster_objects(cluster_id))


def exists(name: str) -> bool:
    return os.path.exists(os.path.join(SHM_DIR, name.lstrip("/")))


@dataclass
class SharedArray:
    """A numpy array over one POSIX shared-memory object.

    ``array`` is a writable view. Call ``close()`` to unmap (views must be dropped
    first, or the unmap is left to the garbage collector) and ``unlink()`` to remove
    the object from /dev/shm.
    """

    name: str
    array: np.ndarray
    _map: mmap.mmap

    @classmethod
    def create(cls, name: str, shape: int | tuple[int, ...], dtype, *,
               exists_ok: bool = False) -> "SharedArray":
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        size_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if size_bytes <= 0:
            raise ValueError(f"shared array {name} must have a positive size, got {shape}")
        flags = posix_ipc.O_CREAT if exists_ok else posix_ipc.O_CREX
        try:
            mem = posix_ipc.SharedMemory(name, flags, size=size_bytes)
        except posix_ipc.ExistentialError as e:
            raise SharedMemoryError(f"shared memory {name} already exists") from e
        try:
            if exists_ok and mem.size != size_bytes:
                os.ftruncate(mem.fd, size_bytes)
            buf = mmap.mmap(mem.fd, size_bytes)
        finally:
            mem.close_fd()
        array = np.frombuffer(buf, dtype=dtype).reshape(shape)
        return cls(name, array, buf)

    @classmethod
    def attach(cls, name: str, dtype, *, shape: tuple[int, ...] | None = None,
               readonly: bool = False) -> "SharedArray":
        """Map an existing object; shape defaults to 1-D over its whole size."""
        dtype = np.dtype(dtype)
        try:
            mem = posix_ipc.SharedMemory(name, 0, read_only=readonly)
        except posix_ipc.ExistentialError as e:
            raise SharedMemoryError(f"shared memory {name} does not exist") from e
        try:
            size_bytes = mem.size
            if size_bytes == 0 or size_bytes % dtype.itemsize:
                raise SharedMemoryError(
                    f"shared memory {name} has {size_bytes} bytes, not a multiple of {dtype.itemsize}")
            access = mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE
            buf = mmap.mmap(mem.fd, size_bytes, access=access)
        finally:
            mem.close_fd()
        array = np.frombuffer(buf, dtype=dtype)
        if shape is not None:
            want = int(np.prod(shape, dtype=np.int64))
            if want * dtype.itemsize > size_bytes:
                buf.close()
                raise SharedMemoryError(f"shared memory {name} is smaller than shape {shape}")
            array = array[:want].reshape(shape)
        return cls(name, array, buf)

    @property
    def buffer(self) -> mmap.mmap:
        """The mapping itself (for ``struct`` reads and writes of a few words, cheaper
        than numpy's per-element access; no view is kept)."""
        return self._map

    def close(self) -> None:
        self.array = np.empty(0, dtype=self.array.dtype)
        try:
            self._map.close()
        except BufferError:
            pass  # a caller still holds a view; the map goes when the view does

    def unlink(self) -> bool:
        return unlink(self.name)
