"""A power cut that keeps only what was really synced: the test records every real
``os.fsync``/``os.fdatasync`` the code under test makes, then rewrites a directory tree
to what those calls made durable.

Rules of the model (the worst a file system may do after a power loss):
- A file's bytes are what they were at its last ``fsync``/``fdatasync`` (the file is
  read at that moment, mmap'd pages included); never synced: empty.
- A directory's regular-file entries (names created, renamed, unlinked) are what they
  were at the directory's last ``fsync``; a file renamed over another after that sync
  comes back as the old file, an unlinked one comes back if its data was synced.
- Everything under the root when recording starts counts as durable.
- Directories themselves are not modelled (a directory made after the start stays,
  with no durable entries until it is synced); inode numbers are the files' identities
  (a reused number can only bring back other bytes, never the expected ones).
- Shared memory does not survive a power cut: the caller unlinks the cluster's objects.

The syncs are the real calls (the wrapper calls through first); the recorder only reads
what they made durable, so removing a sync from the code makes a test that uses this fail.
"""
from __future__ import annotations

import os
import stat
import threading


class PowerCut:
    def __init__(self, root: str, monkeypatch, trace: list | None = None) -> None:
        self.root = os.path.realpath(root)
        self.trace = trace  # if given: ("fsync"|"fdatasync", path relative to root) per call
        self._data: dict[int, bytes] = {}  # inode -> bytes at its last sync
        self._entries: dict[str, dict[str, int]] = {}  # directory -> {name: inode} at its last sync
        self._lock = threading.Lock()
        for directory, _, names in os.walk(self.root):
            self._record_directory(directory)
            for name in names:
                path = os.path.join(directory, name)
                if stat.S_ISREG(os.lstat(path).st_mode):
                    with open(path, "rb") as f:
                        self._data[os.fstat(f.fileno()).st_ino] = f.read()
        for call in ("fsync", "fdatasync"):
            monkeypatch.setattr(os, call, self._wrap(call, getattr(os, call)))

    def _wrap(self, call: str, real):
        def synced(fd) -> None:
            real(fd)
            self._synced(call, fd if isinstance(fd, int) else fd.fileno())
        return synced

    def _synced(self, call: str, fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
        if path != self.root and not path.startswith(self.root + os.sep):
            return
        with self._lock:
            if self.trace is not None:
                self.trace.append((call, os.path.relpath(path, self.root)))
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                self._record_directory(path)
            elif stat.S_ISREG(mode):
                # Through /proc: the descriptor may be write-only, the file already unlinked.
                with open(f"/proc/self/fd/{fd}", "rb") as f:
                    self._data[os.fstat(fd).st_ino] = f.read()

    def _record_directory(self, directory: str) -> None:
        self._entries[directory] = {
            entry.name: entry.inode() for entry in os.scandir(directory)
            if entry.is_file(follow_symlinks=False)}

    def cut(self) -> dict[str, int]:
        """Rewrite the tree to what was durable; returns {path: bytes} of what is left.
        The processes or objects that wrote the files must have let go of them."""
        left = {}
        with self._lock:
            for directory, _, names in os.walk(self.root):
                for name in names:
                    os.unlink(os.path.join(directory, name))
                for name, inode in self._entries.get(directory, {}).items():
                    path = os.path.join(directory, name)
                    with open(path, "wb") as f:
                        f.write(self._data.get(inode, b""))
                    left[os.path.relpath(path, self.root)] = len(self._data.get(inode, b""))
        return left
